"""Graph optimizer passes: each one run on the cpu backend before and after, on random inputs.

Every case checks the outputs agree within fp32 tolerance, the graph still validates, and the pass
is idempotent (a second run rewrites nothing). Small graphs show each rewrite; ESPCN and the two
PP-OCRv4 models show the passes on real networks.
"""

import numpy as np
import pytest
from helpers.models import espcn_onnx

import tinydl as td
from tinydl.backends.cpu import CPUKernel
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate
from tinydl.ops.activation import ACTIVATION_PARAMS, ACTIVATIONS
from tinydl.passes import LEVELS, PASSES, PassManager, optimize

F32 = "float32"


def graph(nodes, inputs, outputs=("y",), inits=None) -> Graph:
    return validate(
        Graph(
            inputs=[Value(name, F32, shape) for name, shape in inputs.items()],
            outputs=[Value(name) for name in outputs],
            nodes=[
                Node(op, list(i), list(o), dict(a or {}), name=f"n{k}")
                for k, (op, i, o, a) in enumerate(nodes)
            ],
            initializers={k: np.asarray(v) for k, v in (inits or {}).items()},
        )
    )


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def structure(g: Graph):
    return [(n.op, n.inputs, n.outputs, repr(n.attrs)) for n in g.nodes], sorted(g.initializers)


def rel_err(got, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def check(g: Graph, passes, feeds, tol=1e-5) -> Graph:
    """Run `passes` (a level or a pass name); outputs agree, the graph validates, idempotent."""
    passes = [passes] if isinstance(passes, str) and passes in PASSES else passes
    before = CPUKernel(g).run(feeds)
    snapshot = structure(g)
    out = optimize(g, passes)
    assert structure(g) == snapshot, "the source graph must not change"
    validate(out)
    after = CPUKernel(out).run(feeds)
    for name, ref in before.items():
        assert after[name].shape == ref.shape and after[name].dtype == ref.dtype, name
        assert rel_err(after[name], ref) <= tol, f"{name}: {rel_err(after[name], ref):.2e}"
    for name in LEVELS.get(passes, passes) if isinstance(passes, str) else passes:
        assert PASSES[name](out) == 0, f"{name} is not idempotent"
    assert structure(optimize(out, passes)) == structure(out)
    return out


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


# -- constant folding ----------------------------------------------------------------------------


def test_constant_folding_shape_chain_over_static_dims(rng):
    # Reshape(x, [-1, C]) spelled the way exporters write it, with N, H, W symbolic.
    g = graph(
        [
            ("Shape", ["x"], ["s"], None),
            ("Cast", ["s"], ["s32"], {"to": 6}),
            ("Slice", ["s32", "one", "two"], ["c32"], None),
            ("Cast", ["c32"], ["c"], {"to": 7}),
            ("Concat", ["minus1", "c"], ["target"], {"axis": 0}),
            ("Reshape", ["x", "target"], ["r"], None),
            ("Constant", [], ["k"], {"value_float": 2.0}),
            ("Add", ["k", "half"], ["k2"], None),
            ("Mul", ["r", "k2"], ["y"], None),
        ],
        {"x": ("N", 4, "H", "W")},
        inits={"one": [1], "two": [2], "minus1": [-1], "half": np.float32(0.5)},
    )
    out = check(g, ["constant_folding", "dead_node_elimination"], {"x": f32(rng, 2, 4, 3, 5)})
    assert ops(out) == ["Reshape", "Mul"]
    assert out.initializers[out.nodes[0].inputs[1]].tolist() == [-1, 4]


def test_constant_folding_fully_static_chain_and_size_bound(rng, monkeypatch):
    from tinydl.passes import constant_folding

    monkeypatch.setattr(constant_folding, "FOLD_LIMIT", 2**20)
    big = np.ones(2**21, np.float32)  # above the fold limit: Add(big, big) stays a node
    g = graph(
        [
            ("Shape", ["x"], ["s"], None),
            ("Reshape", ["x", "s"], ["y"], None),
            ("Add", ["big", "big"], ["b2"], None),
            ("ReduceMean", ["b2"], ["z"], {"keepdims": 0}),
        ],
        {"x": (2, 3)},
        outputs=("y", "z"),
        inits={"big": big},
    )
    out = check(g, "constant_folding", {"x": f32(rng, 2, 3)})
    assert ops(out) == ["Reshape", "Add", "ReduceMean"]


def test_weight_standardization_of_a_large_layer_folds(rng):
    """NF-ResNet's weight standardization as timm exports it (Reshape -> BatchNormalization in
    training mode -> Reshape -> Mul by a gain) of a 512x256x3x3 weight (1.2 M elements, over
    the fold limit before): folded into the convolution's weights, the outputs unchanged."""
    w = rng.standard_normal((512, 256, 3, 3)).astype(np.float32)
    ones, zeros = np.ones(512, np.float32), np.zeros(512, np.float32)
    g = graph(
        [
            ("Reshape", ["w", "flat"], ["wf"], None),
            ("BatchNormalization", ["wf", "ones", "zeros", "zeros", "ones"], ["ws"],
             {"training_mode": 1, "momentum": 0.0, "epsilon": 1e-5}),
            ("Reshape", ["ws", "wshape"], ["wr"], None),
            ("Mul", ["wr", "gain"], ["wg"], None),
            ("Conv", ["x", "wg"], ["y"], {"pads": [1, 1, 1, 1]}),
        ],
        {"x": (1, 256, 6, 6)},
        inits={
            "w": w, "ones": ones, "zeros": zeros, "flat": np.array([1, 512, -1], np.int64),
            "wshape": np.array(w.shape, np.int64),
            "gain": rng.random((512, 1, 1, 1)).astype(np.float32),
        },
    )  # fmt: skip
    out = check(g, "constant_folding", {"x": f32(rng, 1, 256, 6, 6)})
    assert ops(out) == ["Conv"]


# -- identity removal ------------------------------------------------------------------------------


def test_identity_removal_keeps_output_names(rng):
    g = graph(
        [
            ("Identity", ["x"], ["a"], None),
            ("Dropout", ["a"], ["b"], None),
            ("Mul", ["b", "one"], ["c"], None),
            ("Add", ["zero", "c"], ["d"], None),
            ("Cast", ["d"], ["e"], {"to": 1}),
            ("Relu", ["e"], ["f"], None),
            ("Transpose", ["f"], ["g"], {"perm": [0, 1]}),
            ("Identity", ["g"], ["y"], None),
        ],
        {"x": ("N", 3)},
        inits={"one": np.ones((1, 1), np.float32), "zero": np.zeros(3, np.float32)},
    )
    out = check(g, "identity_removal", {"x": f32(rng, 4, 3)})
    assert [(n.op, n.inputs, n.outputs) for n in out.nodes] == [("Relu", ["x"], ["y"])]


def test_identity_removal_leaves_what_changes_values(rng):
    g = graph(
        [
            ("Mul", ["x", "two"], ["a"], None),  # not neutral
            ("Add", ["a", "zeros"], ["b"], None),  # broadcasts (3,) up to (2, 3, 3): shape grows
            ("Dropout", ["b"], ["c", "mask"], None),  # its mask is read
            ("Cast", ["mask"], ["m"], {"to": 1}),
            ("Mul", ["c", "m"], ["y"], None),
        ],
        {"x": (3,)},
        inits={"two": np.float32(2), "zeros": np.zeros((2, 3, 3), np.float32)},
    )
    out = check(g, "identity_removal", {"x": f32(rng, 3)})
    assert len(out.nodes) == len(g.nodes)


# -- dead nodes ------------------------------------------------------------------------------------


def test_dead_node_elimination(rng):
    g = graph(
        [
            ("Relu", ["x"], ["y"], None),
            ("Sigmoid", ["x"], ["dead"], None),
            ("Tanh", ["dead"], ["dead2"], None),
        ],
        {"x": (2, 3)},
        inits={"unused": np.ones(3, np.float32)},
    )
    out = check(g, "dead_node_elimination", {"x": f32(rng, 2, 3)})
    assert ops(out) == ["Relu"] and not out.initializers


# -- BatchNormalization folding --------------------------------------------------------------------


def bn_inits(rng, c: int, prefix: str = "bn") -> dict:
    return {
        f"{prefix}_s": f32(rng, c) + 1,
        f"{prefix}_b": f32(rng, c),
        f"{prefix}_m": f32(rng, c),
        f"{prefix}_v": np.abs(f32(rng, c)) + 0.5,
    }


def bn(x: str, y: str, prefix: str = "bn"):
    return ("BatchNormalization", [x, *(f"{prefix}_{k}" for k in "sbmv")], [y], {"epsilon": 1e-3})


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_folds_into_conv(rng, bias):
    w = {"w": f32(rng, 6, 2, 3, 3), **({"b": f32(rng, 6)} if bias else {})}
    conv_in = ["x", "w", "b"] if bias else ["x", "w"]
    g = graph(
        [("Conv", conv_in, ["c"], {"group": 2, "pads": [1, 1, 1, 1]}), bn("c", "y")],
        {"x": ("N", 4, "H", "W")},
        inits={**w, **bn_inits(rng, 6)},
    )
    out = check(g, "batch_norm_folding", {"x": f32(rng, 2, 4, 5, 7)})
    assert ops(out) == ["Conv"] and out.nodes[0].outputs == ["y"]


def test_batch_norm_folds_into_conv_transpose_with_groups(rng):
    g = graph(
        [("ConvTranspose", ["x", "w"], ["c"], {"group": 2, "strides": [2, 2]}), bn("c", "y")],
        {"x": (1, 4, 3, 3)},
        inits={"w": f32(rng, 4, 3, 2, 2), **bn_inits(rng, 6)},
    )
    out = check(g, "batch_norm_folding", {"x": f32(rng, 1, 4, 3, 3)})
    assert ops(out) == ["ConvTranspose"]


@pytest.mark.parametrize("trans_b, c_shape", [(0, None), (1, (5,)), (1, (3, 5)), (0, (1, 5))])
def test_batch_norm_folds_into_gemm(rng, trans_b, c_shape):
    inits = {"B": f32(rng, 5, 4) if trans_b else f32(rng, 4, 5), **bn_inits(rng, 5)}
    gemm_in = ["a", "B"]
    if c_shape:
        inits["C"] = f32(rng, *c_shape)
        gemm_in.append("C")
    g = graph(
        [("Gemm", gemm_in, ["m"], {"transB": trans_b, "alpha": 0.5, "beta": 2.0}), bn("m", "y")],
        {"a": (3, 4)},
        inits=inits,
    )
    out = check(g, "batch_norm_folding", {"a": f32(rng, 3, 4)})
    assert ops(out) == ["Gemm"]


def test_batch_norm_stays_when_conv_output_is_read_elsewhere(rng):
    g = graph(
        [("Conv", ["x", "w"], ["c"], None), bn("c", "y"), ("Relu", ["c"], ["z"], None)],
        {"x": (1, 2, 4, 4)},
        outputs=("y", "z"),
        inits={"w": f32(rng, 3, 2, 1, 1), **bn_inits(rng, 3)},
    )
    out = check(g, "batch_norm_folding", {"x": f32(rng, 1, 2, 4, 4)})
    assert len(out.nodes) == 3


# -- Mul/Add by constants into convolutions --------------------------------------------------------


def test_affine_after_conv_folds(rng):
    g = graph(
        [
            ("Conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}),
            ("Mul", ["scale", "c"], ["m"], None),  # per channel, constant first
            ("Add", ["m", "shift"], ["a"], None),  # scalar
            ("Sub", ["offset", "a"], ["s"], None),  # c - y
            ("Div", ["s", "four"], ["y"], None),
        ],
        {"x": ("N", 3, "H", "W")},
        inits={
            "w": f32(rng, 5, 3, 3, 3),
            "b": f32(rng, 5),
            "scale": f32(rng, 1, 5, 1, 1),
            "shift": np.float32(0.3),
            "offset": f32(rng, 5, 1, 1),
            "four": np.float32(4),
        },
    )
    out = check(g, "affine_folding", {"x": f32(rng, 2, 3, 6, 5)})
    assert ops(out) == ["Conv"] and out.nodes[0].outputs == ["y"]


def test_folds_and_fusions_of_independent_blocks_share_one_look_at_the_graph(rng, monkeypatch):
    """A stack of Conv -> Mul -> Add -> Relu blocks (PP-OCRv4's MobileOne pattern): every block's
    scale and shift fold and every Relu fuses, with a few looks at the graph's readers rather
    than one per rewrite (a Mul's fold changes the Add's producer: the Add waits for the next
    sweep); the outputs agree."""
    import tinydl.passes.rewrite as rewrite

    blocks, c = 12, 4
    nodes, inits, x = [], {}, "x"
    for i in range(blocks):
        nodes += [
            ("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], {"pads": [1, 1, 1, 1]}),
            ("Mul", [f"c{i}", f"s{i}"], [f"m{i}"], None),
            ("Add", [f"m{i}", f"t{i}"], [f"a{i}"], None),
            ("Relu", [f"a{i}"], ["y" if i == blocks - 1 else f"r{i}"], None),
        ]
        inits |= {
            f"w{i}": f32(rng, c, c if i else 3, 3, 3, scale=0.3),
            f"b{i}": f32(rng, c),
            f"s{i}": f32(rng, 1, c, 1, 1),
            f"t{i}": f32(rng, 1, c, 1, 1),
        }
        x = f"r{i}"
    g = graph(nodes, {"x": ("N", 3, "H", "W")}, inits=inits)
    looks = []
    real = rewrite.Uses.__init__
    monkeypatch.setattr(rewrite.Uses, "__init__", lambda self, g: looks.append(1) or real(self, g))
    out = optimize(g, ["affine_folding", "conv_activation_fusion"])
    assert ops(out) == ["tinydl.FusedConv"] * blocks
    assert len(looks) <= 8  # (one a rewrite: 3 * blocks + 2)
    monkeypatch.setattr(rewrite.Uses, "__init__", real)
    check(g, ["affine_folding", "conv_activation_fusion"], {"x": f32(rng, 2, 3, 7, 6)})


def test_affine_before_conv_folds_where_exact(rng):
    g = graph(
        [
            ("Mul", ["x", "s"], ["xs"], None),  # scale before a padded grouped conv: exact
            ("Conv", ["xs", "w1"], ["c1"], {"pads": [1, 1, 1, 1], "group": 2}),
            ("Relu", ["c1"], ["r1"], None),
            ("Add", ["r1", "t"], ["rt"], None),  # shift before an unpadded conv: exact
            ("Conv", ["rt", "w2", "b2"], ["c2"], None),
            ("Relu", ["c2"], ["r2"], None),
            ("Sub", ["r2", "t2"], ["r2t"], None),  # shift before a padded conv: stays
            ("Conv", ["r2t", "w3"], ["c3"], {"pads": [1, 1, 1, 1]}),
            ("Relu", ["c3"], ["r3"], None),
            ("Div", ["r3", "s4"], ["r3s"], None),  # scale before a ConvTranspose: exact
            ("ConvTranspose", ["r3s", "w4"], ["y"], {"strides": [2, 2]}),
        ],
        {"x": ("N", 4, "H", "W")},
        inits={
            "s": f32(rng, 4, 1, 1),
            "w1": f32(rng, 6, 2, 3, 3),
            "t": f32(rng, 1, 6, 1, 1),
            "w2": f32(rng, 3, 6, 1, 1),
            "b2": f32(rng, 3),
            "t2": np.float32(0.7),
            "w3": f32(rng, 3, 3, 3, 3),
            "s4": np.abs(f32(rng, 1, 3, 1, 1)) + 0.5,
            "w4": f32(rng, 3, 2, 2, 2),
        },
    )
    out = check(g, "affine_folding", {"x": f32(rng, 1, 4, 5, 6)})
    assert ops(out) == [
        *("Conv", "Relu", "Conv", "Relu", "Sub", "Conv", "Relu", "ConvTranspose"),
    ]


# -- Pad folding -----------------------------------------------------------------------------------


def test_pad_folds_into_conv_and_pools(rng):
    g = graph(
        [
            ("Pad", ["x", "p"], ["xp"], None),
            ("Conv", ["xp", "w"], ["c"], {"pads": [0, 1, 0, 1]}),
            ("Pad", ["c", "p"], ["cp"], None),
            ("AveragePool", ["cp"], ["a"], {"kernel_shape": [3, 3]}),
            ("Pad", ["a", "p", "neg_inf"], ["ap"], None),
            ("MaxPool", ["ap"], ["y"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ],
        {"x": ("N", 2, "H", "W")},
        inits={
            "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
            "w": f32(rng, 3, 2, 3, 3),
            "neg_inf": np.float32(-np.inf),
        },
    )
    out = check(g, "pad_folding", {"x": f32(rng, 2, 2, 7, 8)})
    assert ops(out) == ["Conv", "AveragePool", "MaxPool"]
    assert out.nodes[0].attrs["pads"] == [1, 2, 1, 2]
    assert out.nodes[1].attrs["count_include_pad"] == 1


def test_a_pad_read_by_several_convolutions_folds_into_each(rng):
    """A Pad shared by a block's two branches (MediaPipe's pose detector: a stride-2 depthwise
    conv and a 1x1 conv read one padded value) folds into both; when one reader cannot take
    the padding (a Relu), the Pad stays for all."""

    def build(third):
        nodes = [
            ("Pad", ["x", "p"], ["xp"], None),
            ("Conv", ["xp", "w"], ["a"], {"strides": [2, 2]}),
            ("Conv", ["xp", "w1"], ["b"], {"pads": [1, 0, 0, 1]}),
        ]
        if third:
            nodes.append(("Relu", ["xp"], ["r"], None))
        return graph(
            nodes,
            {"x": ("N", 2, "H", "W")},
            inits={
                "p": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64),
                "w": f32(rng, 3, 2, 3, 3),
                "w1": f32(rng, 3, 2, 1, 1),
            },
            outputs=["a", "b", "r"] if third else ["a", "b"],
        )

    out = check(build(False), "pad_folding", {"x": f32(rng, 2, 2, 8, 10)})
    assert ops(out) == ["Conv", "Conv"]
    assert out.nodes[0].attrs["pads"] == [0, 0, 1, 1]
    assert out.nodes[1].attrs["pads"] == [1, 0, 1, 2]
    out = check(build(True), "pad_folding", {"x": f32(rng, 2, 2, 8, 10)})
    assert ops(out)[0] == "Pad"


def test_pad_stays_when_folding_would_change_values(rng):
    g = graph(
        [
            ("Pad", ["x", "p", "one"], ["a"], None),  # pads with 1, Conv pads with 0
            ("Conv", ["a", "w"], ["b"], None),
            ("Pad", ["b", "pc"], ["c"], None),  # pads a channel
            ("Conv", ["c", "w2"], ["d"], None),
            ("Pad", ["d", "p"], ["e"], None),  # AveragePool with pads of its own, not counted
            ("AveragePool", ["e"], ["f"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
            ("Pad", ["f", "p"], ["g"], None),  # zeros, but MaxPool pads with -inf
            ("MaxPool", ["g"], ["y"], {"kernel_shape": [2, 2]}),
        ],
        {"x": (1, 2, 6, 6)},
        inits={
            "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
            "pc": np.array([0, 1, 0, 0, 0, 0, 0, 0], np.int64),
            "one": np.float32(1),
            "w": f32(rng, 3, 2, 3, 3),
            "w2": f32(rng, 3, 4, 1, 1),
        },
    )
    out = check(g, "pad_folding", {"x": f32(rng, 1, 2, 6, 6)})
    assert len(out.nodes) == len(g.nodes)


# -- activation patterns and Conv + activation fusion ----------------------------------------------


def test_hard_swish_patterns(rng):
    g = graph(
        [
            ("Add", ["x", "three"], ["a"], None),
            ("Clip", ["a", "zero", "six"], ["c"], None),
            ("Mul", ["x", "c"], ["m"], None),
            ("Div", ["m", "six"], ["h1"], None),
            ("HardSigmoid", ["h1"], ["hs"], {"alpha": 1 / 6, "beta": 0.5}),
            ("Mul", ["hs", "h1"], ["h2"], None),
            ("Add", ["three", "h2"], ["a3"], None),
            ("Clip", ["a3", "zero", "six"], ["c3"], None),
            ("Mul", ["c3", "sixth"], ["d3"], None),
            ("Mul", ["h2", "d3"], ["y"], None),
        ],
        {"x": ("N", 5)},
        inits={
            "three": np.float32(3),
            "zero": np.float32(0),
            "six": np.float32(6),
            "sixth": np.float32(1 / 6),
        },
    )
    out = check(g, "activation_patterns", {"x": f32(rng, 4, 5, scale=4)})
    assert ops(out) == ["HardSwish"] * 3


def test_gelu_pattern_as_pytorch_exports_it(rng):
    """F.gelu and transformers' x * 0.5 * (1 + erf(x / sqrt 2)), exported by torch.onnx: each
    becomes one Gelu node with the same outputs (the second reads the first, so its x is made
    by a Mul of the first pattern and read twice)."""
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def forward(self, x):
            h = torch.nn.functional.gelu(x)
            return h * 0.5 * (1.0 + torch.erf(h / 1.4142135623730951))

    g = td.from_torch(Model(), torch.randn(3, 16), opset_version=17, dynamo=False)
    assert ops(g).count("Erf") == 2
    out = check(g, "activation_patterns", {"input": f32(rng, 3, 16, scale=3)})
    assert ops(out) == ["Gelu", "Gelu"]
    assert all(n.attrs == {"approximate": "none"} for n in out.nodes)


def test_gelu_pattern_variants(rng):
    """Erf(x * (1 / sqrt 2)), 0.5 first, 1 + erf: one Gelu; with 0.6 for 0.5, or the half
    product read elsewhere, nothing changes."""
    inits = {
        "half": np.float32(0.5),
        "six_tenths": np.float32(0.6),
        "one": np.float32(1),
        "inv_sqrt2": np.float32(1 / np.sqrt(2)),
    }

    def pattern(half, outputs=("y",)):
        return graph(
            [
                ("Mul", ["half" if half else "six_tenths", "x"], ["h"], None),
                ("Mul", ["x", "inv_sqrt2"], ["s"], None),
                ("Erf", ["s"], ["e"], None),
                ("Add", ["one", "e"], ["a"], None),
                ("Mul", ["h", "a"], ["y"], None),
            ],
            {"x": ("N", 7)},
            outputs,
            inits,
        )

    feeds = {"x": f32(rng, 4, 7, scale=3)}
    assert ops(check(pattern(True), "activation_patterns", feeds)) == ["Gelu"]
    assert "Gelu" not in ops(check(pattern(False), "activation_patterns", feeds))
    kept = check(pattern(True, ("y", "h")), "activation_patterns", feeds)
    assert "Gelu" not in ops(kept)


# case -> (activation nodes after the conv, FusedConv activation, its parameters)
CONV_ACTIVATIONS = {
    "relu": ([("Relu", ["c"], ["y"], None)], "Relu", {}),
    "relu6": ([("Clip", ["c", "zero", "six"], ["y"], None)], "Clip", {"min": 0.0, "max": 6.0}),
    "clip": ([("Clip", ["c", "lo", "hi"], ["y"], None)], "Clip", {"min": -0.5, "max": 0.25}),
    "clip_min_only": ([("Clip", ["c", "lo"], ["y"], None)], "Clip", {"min": -0.5, "max": None}),
    "tanh": ([("Tanh", ["c"], ["y"], None)], "Tanh", {}),
    "sigmoid": ([("Sigmoid", ["c"], ["y"], None)], "Sigmoid", {}),
    "leaky_relu": ([("LeakyRelu", ["c"], ["y"], {"alpha": 0.3})], "LeakyRelu", {"alpha": 0.3}),
    "leaky_relu_default": ([("LeakyRelu", ["c"], ["y"], None)], "LeakyRelu", {"alpha": 0.01}),
    "prelu": ([("PRelu", ["c", "slope"], ["y"], None)], "PRelu", {}),
    "hard_swish": ([("HardSwish", ["c"], ["y"], None)], "HardSwish", {}),
    "hard_sigmoid": (
        [("HardSigmoid", ["c"], ["y"], {"alpha": 0.3, "beta": 0.4})],
        "HardSigmoid",
        {"alpha": 0.3, "beta": 0.4},
    ),
    "silu": (
        [("Sigmoid", ["c"], ["s"], None), ("Mul", ["s", "c"], ["y"], None)],
        "SiLU",
        {},
    ),
    "x*hard_sigmoid(x)": (
        [
            ("HardSigmoid", ["c"], ["s"], {"alpha": 1 / 6, "beta": 0.5}),
            ("Mul", ["c", "s"], ["y"], None),
        ],
        "HardSwish",
        {},
    ),
}


def test_conv_activation_cases_cover_the_activation_table():
    fused = {activation for _, activation, _ in CONV_ACTIVATIONS.values()}
    assert fused == set(ACTIVATIONS)


@pytest.mark.parametrize("name", list(CONV_ACTIVATIONS))
def test_conv_activation_fusion(rng, name):
    act_nodes, activation, params = CONV_ACTIVATIONS[name]
    g = graph(
        [("Conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}), *act_nodes],
        {"x": ("N", 3, "H", "W")},
        inits={
            "w": f32(rng, 4, 3, 3, 3),
            "b": f32(rng, 4),
            "zero": np.float32(0),
            "six": np.float32(6),
            "lo": np.float32(-0.5),
            "hi": np.float32(0.25),
            "slope": f32(rng, 4, 1, 1),
        },
    )
    out = check(g, "conv_activation_fusion", {"x": f32(rng, 2, 3, 5, 6, scale=3)})
    (fused,) = out.nodes
    assert fused.op == "tinydl.FusedConv" and fused.attrs["activation"] == activation
    # Every parameter attribute is set exactly when the activation takes it.
    unset = {k: None for k in ACTIVATION_PARAMS if k not in params}
    assert {k: fused.attrs[k] for k in ACTIVATION_PARAMS} == {**unset, **params}
    assert fused.outputs == ["y"] and fused.inputs[3:] == (["slope"] if name == "prelu" else [])


def test_fusion_leaves_conv_whose_output_is_read_twice(rng):
    g = graph(
        [
            ("Conv", ["x", "w"], ["c"], None),
            ("Relu", ["c"], ["y"], None),
            ("Tanh", ["c"], ["z"], None),
        ],
        {"x": (1, 2, 4, 4)},
        outputs=("y", "z"),
        inits={"w": f32(rng, 3, 2, 1, 1)},
    )
    out = check(g, "conv_activation_fusion", {"x": f32(rng, 1, 2, 4, 4)})
    assert ops(out) == ["Conv", "Relu", "Tanh"]


@pytest.mark.parametrize(
    "attrs, inputs, message",
    [
        ({"activation": "gelu"}, ["x", "w"], "activation must be one of"),
        ({"activation": "relu"}, ["x", "w"], "activation must be one of"),  # the old spelling
        ({"activation": "PRelu"}, ["x", "w"], "slope"),
        ({"activation": "Relu"}, ["x", "w", "", "slope"], "slope"),
        ({"activation": "Relu", "alpha": 0.2}, ["x", "w"], "alpha are no parameter of Relu"),
        ({"min": 0.0}, ["x", "w"], "min are no parameter of none"),
    ],
)
def test_fused_conv_checks_its_activation(rng, attrs, inputs, message):
    with pytest.raises(td.InvalidModelError, match=message):
        graph(
            [("tinydl.FusedConv", inputs, ["y"], attrs)],
            {"x": (1, 2, 4, 4)},
            inits={"w": f32(rng, 3, 2, 1, 1), "slope": f32(rng, 3, 1, 1)},
        )


@pytest.mark.parametrize("activation", ["none", *ACTIVATIONS])
def test_fused_conv_reference_is_conv_then_the_activation(rng, activation):
    """The FusedConv reference equals Conv, then the table's reference of its activation."""
    from tinydl.ops.conv import conv

    x, w, b = f32(rng, 1, 2, 5, 5, scale=3), f32(rng, 3, 2, 3, 3), f32(rng, 3)
    slope = f32(rng, 3, 1, 1)
    act = ACTIVATIONS.get(activation)
    params = {"Clip": {"min": -0.5, "max": 0.5}, "LeakyRelu": {"alpha": 0.2}}.get(activation, {})
    attrs = {"activation": activation, **params}
    inputs = ["x", "w", "b", *(["slope"] if act and act.slope else [])]
    g = graph(
        [("tinydl.FusedConv", inputs, ["y"], attrs)],
        {"x": (1, 2, 5, 5)},
        inits={"w": w, "b": b, "slope": slope},
    )
    got = td.compile(g, backends=("numpy",), optimize="none").run({"x": x})["y"]
    fused = {"activation", *ACTIVATION_PARAMS}
    y = conv(x, w, b, **{k: v for k, v in g.nodes[0].attrs.items() if k not in fused})
    want = y if act is None else act.apply(y, params, slope)
    np.testing.assert_array_equal(got, want)


def test_old_fused_conv_activation_names_load_from_tdl_files(rng, tmp_path):
    """A .tdl file written when FusedConv spelled its activations in snake_case still loads."""
    g = graph(
        [("Conv", ["x", "w"], ["c"], None), ("Clip", ["c", "zero", "six"], ["y"], None)],
        {"x": (1, 2, 4, 4)},
        inits={"w": f32(rng, 3, 2, 1, 1), "zero": np.float32(0), "six": np.float32(6)},
    )
    fused = optimize(g, ["conv_activation_fusion"])
    node = fused.nodes[0]
    node.attrs = {**node.attrs, "activation": "relu6", "min": None, "max": None}
    td.save(fused, tmp_path / "old.tdl")
    loaded = td.load(tmp_path / "old.tdl")
    attrs = loaded.nodes[0].attrs
    assert (attrs["activation"], attrs["min"], attrs["max"]) == ("Clip", 0.0, 6.0)
    x = f32(rng, 1, 2, 4, 4, scale=8)
    want = td.compile(g, backends=("numpy",), optimize="none").run({"x": x})["y"]
    np.testing.assert_array_equal(
        td.compile(loaded, backends=("numpy",), optimize="none").run({"x": x})["y"], want
    )


# -- the pass manager ------------------------------------------------------------------------------


def test_levels(rng):
    g = graph(
        [
            ("Identity", ["x"], ["i"], None),
            ("Conv", ["i", "w"], ["c"], None),
            bn("c", "n"),
            ("Relu", ["n"], ["y"], None),
        ],
        {"x": (1, 2, 4, 4)},
        inits={"w": f32(rng, 3, 2, 1, 1), **bn_inits(rng, 3)},
    )
    feeds = {"x": f32(rng, 1, 2, 4, 4)}
    assert ops(check(g, "none", feeds)) == ops(g)
    assert ops(check(g, "basic", feeds)) == ["Conv", "BatchNormalization", "Relu"]
    assert ops(check(g, "all", feeds)) == ["tinydl.FusedConv"]
    manager = PassManager("all")
    manager.run(g)
    assert (manager.report.nodes_before, manager.report.nodes_after) == (4, 1)
    assert manager.report.rewrites == {
        "identity_removal": 1,
        "batch_norm_folding": 1,
        "conv_activation_fusion": 1,
    }
    with pytest.raises(ValueError, match="optimize level must be one of none, basic, all"):
        PassManager("O3")
    with pytest.raises(ValueError, match="unknown pass"):
        PassManager(["constant_folding", "loop_unrolling"])


def test_compile_optimizes_and_keeps_the_source_graph(rng):
    g = graph(
        [("Conv", ["x", "w"], ["c"], None), ("Relu", ["c"], ["y"], None)],
        {"x": (1, 2, 4, 4)},
        inits={"w": f32(rng, 3, 2, 1, 1)},
    )
    x = f32(rng, 1, 2, 4, 4)
    fast, plain = (
        td.compile(g, backends=("numpy",)),
        td.compile(g, backends=("numpy",), optimize="none"),
    )
    assert fast.source_graph is g and len(g.nodes) == 2
    assert ops(fast.graph) == ["tinydl.FusedConv"] and ops(plain.graph) == ["Conv", "Relu"]
    assert fast.profile()["optimize"]["nodes_after"] == 1
    np.testing.assert_array_equal(fast.run({"x": x})["y"], plain.run({"x": x})["y"])


# -- real models -----------------------------------------------------------------------------------

MODELS = {
    "espcn": (1, 1, 24, 32),
    "ppocrv4_det": (1, 3, 64, 96),
    "ppocrv4_rec": (1, 3, 48, 96),
}


@pytest.fixture(scope="module")
def models(rapidocr_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("espcn") / "espcn.onnx"
    espcn_onnx(path, 3, np.random.default_rng(3))
    return {
        "espcn": td.load(path),
        "ppocrv4_det": td.load(rapidocr_models / "ch_PP-OCRv4_det_infer.onnx"),
        "ppocrv4_rec": td.load(rapidocr_models / "ch_PP-OCRv4_rec_infer.onnx"),
    }


@pytest.mark.parametrize("passes", [*PASSES, "basic", "all"])
@pytest.mark.parametrize("model", list(MODELS))
def test_passes_on_models(models, rng, model, passes):
    g = models[model]
    feeds = {g.inputs[0].name: rng.uniform(-1, 1, MODELS[model]).astype(np.float32)}
    out = check(g, passes, feeds, tol=1e-4)  # the limit test_models holds tinydl to vs ORT
    if passes == "all":
        assert len(out.nodes) < len(g.nodes)


def test_optimized_graph_round_trips_through_tdl(models, rng, tmp_path):
    fast = optimize(models["ppocrv4_det"])
    td.save(fast, tmp_path / "det.tdl")
    loaded = td.load(tmp_path / "det.tdl")
    assert ops(loaded) == ops(fast)
    x = rng.uniform(-1, 1, MODELS["ppocrv4_det"]).astype(np.float32)
    a = CPUKernel(fast).run({"x": x})
    b = td.compile(loaded, backends=("numpy",), optimize="none").run({"x": x})
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def _identity_chain(n: int) -> Graph:
    nodes = [Node("Identity", [f"v{i}"], [f"v{i + 1}"], name=f"id{i}") for i in range(n)]
    nodes.append(Node("Relu", [f"v{n}"], ["y"], name="relu"))
    nodes.append(Node("Identity", ["y"], ["z"], name="tail"))
    return validate(Graph([Value("v0", "float32", (1, 4))], [Value("z", "float32", None)], nodes))


def test_identity_removal_is_linear_in_the_graph():
    """A chain of 20,000 Identity nodes goes in one walk (it used to rename every node once per
    removed node: 251 s; linear, it takes about 0.4 s on a 2-core machine; the bound leaves
    25x for a slow or busy machine)."""
    import time

    from tinydl.passes import identity_removal

    graph = _identity_chain(20000)
    t = time.perf_counter()
    assert identity_removal.run(graph) == 20001
    elapsed = time.perf_counter() - t
    assert [node.op for node in graph.nodes] == ["Relu"]
    assert graph.nodes[0].inputs == ["v0"] and graph.nodes[0].outputs == ["z"]
    assert elapsed < 10, f"removing 20,000 Identity nodes took {elapsed:.1f} s"
