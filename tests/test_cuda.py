"""The cuda backend as a whole, on an NVIDIA GPU: the fused ESPCN chain (edges, batches, odd
sizes), PP-OCRv4 rec vs onnxruntime, CUDA-graph replay and its output buffers, DLPack inputs,
device outputs, profiling and the on-disk kernel cache. What every GPU backend must do alike
(PP-OCRv4 det vs onnxruntime, a plan per shape) is in test_gpu.py.

Skipped where CuPy or a CUDA device is missing (CI has no GPU): on a GPU machine run
`python -m pytest tests/test_cuda.py tests/test_gpu.py tests/test_gpu_ops.py` (README,
"Development").
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.models import (
    CONV3D_CASES,
    CONV_CHAINS,
    CONV_TRANSPOSE3D_CASES,
    bn_activation_graph,
    check_elementwise_run,
    conv3d_graph,
    conv_chain_graph,
    espcn,
    kernel_of,
    only_plan,
    rel_err,
    small_graph,
    small_reference,
)

import tinydl as td
from tinydl.backends import get_backend
from tinydl.ir.graph import Graph, Node, Value

BACKEND = get_backend("cuda")
if not BACKEND.available():
    pytest.skip(BACKEND.unavailable_reason(), allow_module_level=True)

import cupy as cp  # noqa: E402

from tinydl.backends.cuda.kernels.chain import OP as CHAIN  # noqa: E402
from tinydl.ops import validate  # noqa: E402

# -- the fused chain -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1, 36, 64), (2, 1, 37, 53), (1, 1, 360, 640)])
def test_espcn_fp16_is_one_fused_kernel(tmp_path, rng, shape):
    """fp16: conv+tanh, conv+tanh, conv+pixel shuffle run as one kernel, at tile edges too."""
    graph = espcn(tmp_path, rng)
    y = rng.random(shape, dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"y": y})["out"]
    sess = td.compile(graph, backends=("cuda",), precision="fp16", strict=True)
    got = sess.run({"y": y})["out"]
    plan = only_plan(kernel_of(sess, "cuda"))
    assert [n.op for n in plan.nodes] == [CHAIN]
    assert len(plan.steps) == 1
    assert got.shape == want.shape
    assert rel_err(got, want) <= 1e-2


@pytest.mark.parametrize(
    ("options", "hopper_wgmma"),
    [
        ({}, True),  # Hopper: warpgroup MMAs (20 x 30 tiles); elsewhere mma.sync
        ({"chain_tile": "18,34,512"}, True),
        ({"chain_tile": "12,20,384"}, True),  # three warpgroups
        ({"chain_tile": "16,32,256"}, False),  # layer 3's wgmma accumulators would not fit
        ({"chain_wgmma": False}, False),
        ({"chain_reuse": False}, True),  # layer 2's A from shared memory too
        ({"chain_tile": "22,30,512"}, True),  # layer 2: 24 rows, 3 a warp
        ({"chain_tile": "10,14,512"}, True),  # layer 2 in 2 segments of two rows of 8
        ({"chain_fold": False}, True),  # layer 3 with its column offsets as taps
        ({"chain_split": "8,4,4,4/4,3,3,3"}, True),  # layer 3 folded on every warpgroup
        ({"chain_reuse": False, "chain_fold": False}, True),
    ],
)
@pytest.mark.parametrize("shape", [(2, 1, 37, 53), (1, 1, 97, 131)])
def test_espcn_fp16_chain_kernels_match_the_reference(tmp_path, rng, options, hopper_wgmma, shape):
    """Each variant of the fused chain (tile shapes, warpgroup or warp MMAs, layer 2's A
    reused from registers or read from shared memory) at tile edges, odd sizes and batches,
    against the NumPy reference."""
    from tinydl.backends.cuda.context import get_context

    graph = espcn(tmp_path, rng)
    y = rng.random(shape, dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"y": y})["out"]
    sess = td.compile(
        graph,
        backends=("cuda",),
        precision="fp16",
        strict=True,
        backend_options={"cuda": options},
    )
    got = sess.run({"y": y})["out"]
    (step,) = only_plan(kernel_of(sess, "cuda")).steps
    wgmma = hopper_wgmma and tuple(get_context().cc) == (9, 0)
    assert ("wgmma.mma_async" in step.deferred.source) == wgmma
    assert got.shape == want.shape
    assert rel_err(got, want) <= 1e-2


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"chain_tile": "10,14,512"},
        {"chain_wgmma": False},
        {"chain_reuse": False},
        {"chain_fold": False},
    ],
)
def test_espcn_fp16_chain_blocks_of_several_tiles_match_the_reference(tmp_path, rng, options):
    """More tiles than blocks: each block runs several tiles through its software pipeline (the
    next tile's input fetched during layer 2, layer 3 beside the next tile's layer 1), across
    images, with partial tiles at the right and bottom edges."""
    graph = espcn(tmp_path, rng)
    y = rng.random((2, 1, 187, 700), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"y": y})["out"]
    sess = td.compile(
        graph, backends=("cuda",), precision="fp16", strict=True, backend_options={"cuda": options}
    )
    got = sess.run({"y": y})["out"]
    assert got.shape == want.shape
    assert rel_err(got, want) <= 1e-2


@pytest.mark.parametrize("name", sorted(CONV_CHAINS))
@pytest.mark.parametrize("options", [{}, {"chain_wgmma": False}, {"chain_fold": False}])
def test_other_conv_chains_match_the_reference(rng, name, options):
    """Chains other than ESPCN x3 (other kernel sizes, channel counts, activations, with and
    without DepthToSpace) as one fp16 kernel, on warpgroup MMAs (on Hopper) and mma.sync,
    at odd sizes and two images, against the NumPy reference."""
    graph = conv_chain_graph(rng, name)
    x = rng.random((2, CONV_CHAINS[name][0], 41, 67), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(
        graph, backends=("cuda",), precision="fp16", strict=True, backend_options={"cuda": options}
    )
    got = sess.run({"x": x})["y"]
    assert [n.op for n in only_plan(kernel_of(sess, "cuda")).nodes] == [CHAIN]
    assert got.shape == want.shape
    assert rel_err(got, want) <= 1e-2


def test_a_conv_chain_with_a_shortcut_matches_the_reference(rng):
    """conv -> conv -> conv + the input (YOLO11's C3k bottleneck) at fp16 against NumPy: the
    shortcut is added (the chain kernel, which has no residual, dropped it)."""
    from helpers.models import residual_chain_graph

    graph = residual_chain_graph(rng)
    x = rng.standard_normal((2, 32, 20, 20)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    got = td.compile(graph, backends=("cuda",), precision="fp16", strict=True).run({"x": x})["y"]
    assert rel_err(got, want) <= 1e-2


def test_espcn_fp16_fused_matches_unfused(tmp_path, rng):
    graph = espcn(tmp_path, rng)
    y = rng.random((1, 1, 45, 70), dtype=np.float32)
    fused = td.compile(graph, backends=("cuda",), precision="fp16").run({"y": y})["out"]
    sess = td.compile(graph, backends=("cuda",), precision="fp16")
    kernel_of(sess, "cuda").extra["chain_fusion"] = False  # symbolic shapes: nothing planned yet
    kernel_of(sess, "cuda").extra["conv_tensor_cores"] = False  # one launch per conv
    unfused = sess.run({"y": y})["out"]
    assert len(only_plan(kernel_of(sess, "cuda")).steps) == 3
    assert rel_err(fused, unfused) <= 1e-2


@pytest.mark.parametrize(
    ("n", "c", "oc", "hw", "k", "stride"),
    [
        (1, 64, 64, 56, 3, 1),  # one launch per conv
        (1, 256, 256, 7, 3, 1),  # few tiles: K split over blocks, a workspace and an epilogue
        (2, 3, 48, 33, 7, 2),  # a stem: 3 channels, 7x7, stride 2, odd sizes, 2 images
        (1, 96, 24, 14, 1, 1),  # 1x1, fewer output channels than a tile
    ],
)
@pytest.mark.parametrize("on_input", [False, True])
@pytest.mark.parametrize("precision", ["fp16", "fp16-exact-weights", "tf32", "fp32"])
@pytest.mark.parametrize("kernels", ["off", "only"])
def test_conv_tensor_cores_match_the_reference(
    n, c, oc, hw, k, stride, on_input, precision, kernels, rng, monkeypatch
):
    """Convolutions on tensor cores (implicit GEMM; fp16: weights rounded to fp16, or with
    conv_exact_weights as hi + lo fp16 parts; tf32: float32 values, operands rounded to tf32;
    fp32: 3xTF32), with bias, ReLU and a residual fused, against the NumPy reference and the
    CUDA-core kernel; `on_input`: the convolution reads the graph's float32 input (at fp16 made
    fp16 first). `kernels`: the layer's own kernel ("off") or the generic one ("only")."""
    options = {
        "conv_exact_weights": precision.endswith("exact-weights"),
        "generic_kernels": kernels,
    }
    precision = precision.split("-")[0]
    w = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    out = (hw + 2 * (k // 2) - k) // stride + 1
    nodes = [] if on_input else [Node("Relu", ["x"], ["a"], name="pre")]
    nodes += [
        Node(
            "Conv", ["x" if on_input else "a", "w", "b"], ["c"],
            {"pads": [k // 2] * 4, "strides": [stride] * 2}, name="conv",
        ),
        Node("Add", ["c", "r"], ["s"], name="residual"),
        Node("Relu", ["s"], ["y"], name="post"),
    ]  # fmt: skip
    graph = validate(
        Graph(
            [Value("x", "float32", (n, c, hw, hw)), Value("r", "float32", (n, oc, out, out))],
            [Value("y", "float32", None)],
            nodes,
            {"w": w, "b": bias},
        )
    )
    feeds = {
        "x": rng.standard_normal((n, c, hw, hw)).astype(np.float32),
        "r": rng.standard_normal((n, oc, out, out)).astype(np.float32),
    }
    import tinydl.backends.cuda.kernels.conv as conv_kernels

    taken = []
    real = conv_kernels.conv_tensor_cores
    monkeypatch.setattr(
        conv_kernels, "conv_tensor_cores", lambda b, *a: taken.append(b.node.name) or real(b, *a)
    )
    want = td.compile(graph, backends=("numpy",)).run(feeds)["y"]
    got = td.compile(
        graph, backends=("cuda",), precision=precision, backend_options={"cuda": options}
    ).run(feeds)["y"]
    assert taken == ["conv"]
    cores = td.compile(
        graph, backends=("cuda",), precision=precision,
        backend_options={"cuda": {"conv_tensor_cores": False}},
    ).run(feeds)["y"]  # fmt: skip
    assert taken == ["conv"]  # the CUDA-core session did not take it
    # tf32 rounds both operands to 11 significant bits (2^-11 relative each), fp16 the input
    # (3xTF32 keeps float32's accuracy).
    tolerance = {"fp16": 1e-2, "tf32": 3e-3, "fp32": 1e-5}[precision]
    assert rel_err(got, want) <= tolerance and rel_err(got, cores) <= tolerance
    if precision != "fp16":  # the CUDA-core kernel is exact float32
        assert rel_err(cores, want) <= 1e-5


@pytest.mark.parametrize(("c", "group"), [(64, 8), (256, 16), (128, 4), (192, 12)])
@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
@pytest.mark.parametrize("kernels", ["off", "only"])
def test_grouped_conv_tensor_cores_match_the_reference(
    c, group, precision, kernels, rng, monkeypatch
):
    """Grouped convolutions on tensor cores (each tile reading its groups' channels; one
    tile of channels, several, and a tile count that is not a power of two) against the
    NumPy reference; each layer's own kernel and the generic one."""
    from helpers.models import conv_graph

    import tinydl.backends.cuda.kernels.conv as conv_kernels

    graph = conv_graph(rng, (2, c, 17, 19), c, 3, group=group)
    x = {"x": rng.standard_normal((2, c, 17, 19)).astype(np.float32)}
    taken = []
    real = conv_kernels.conv_tensor_cores
    monkeypatch.setattr(
        conv_kernels, "conv_tensor_cores", lambda b, *a: taken.append(b.node.name) or real(b, *a)
    )
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    options = {"cuda": {"generic_kernels": kernels}}
    got = td.compile(graph, backends=("cuda",), precision=precision, backend_options=options)
    got = got.run(x)["y"]
    assert taken == ["conv"]
    assert rel_err(got, want) <= {"fp16": 1e-2, "tf32": 3e-3, "fp32": 1e-5}[precision]


@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
def test_convolutions_sharing_one_kernel_match_the_reference(precision, rng, monkeypatch):
    """A dense block whose three 1x1 convolutions (32, 96, 160 input channels) share one
    conv_tc.cu kernel, their channel counts passed at launch, then convolutions of differing
    geometry (strides, dilation, padding, kernel shapes; three images of an odd size): each
    computes its own."""
    from helpers.models import CONV_STACK, DENSE_LAYERS, conv_stack_graph

    import tinydl.backends.cuda.context as context

    ctx, asked = context.get_context(), []
    real = ctx.prefetch
    monkeypatch.setattr(ctx, "prefetch", lambda src, *a: asked.append(src) or real(src, *a))
    graph = conv_stack_graph(rng)
    x = {"x": rng.standard_normal((3, 32, 23, 29)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    tolerance = {"fp16": 1e-2, "tf32": 3e-3, "fp32": 1e-5}[precision]
    off = {"cuda": {"generic_kernels": "off"}}
    got = td.compile(
        graph, backends=("cuda",), precision=precision, strict=True, backend_options=off
    ).run(x)["y"]
    assert rel_err(got, want) <= tolerance
    gemms = [src for src in asked if "implicit GEMM" in src and " k(" in src]
    assert len(gemms) == len(CONV_STACK) + DENSE_LAYERS
    assert len(set(gemms)) == len(CONV_STACK) + 1
    # The same layers on generic kernels alone (every extent at launch).
    only = {"cuda": {"generic_kernels": "only"}}
    got = td.compile(
        graph, backends=("cuda",), precision=precision, strict=True, backend_options=only
    ).run(x)["y"]
    assert rel_err(got, want) <= tolerance


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_a_cold_plan_runs_generic_kernels_then_its_own(precision, rng, monkeypatch, tmp_path):
    """With an empty kernel cache a plan's first runs take the generic convolution kernels
    while the layers' own compile on the later threads; then it switches to those (its CUDA
    graphs captured again) and the outputs stay the reference's. A second compile runs the
    layers' own kernels from its first run."""
    from helpers.models import conv_stack_graph

    import tinydl.backends.cuda.context as context

    # A cold start: an empty kernel cache, and nothing compiled in this process either.
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(context.get_context(), "_where", {})
    graph = conv_stack_graph(rng)
    x = {"x": rng.standard_normal((3, 32, 23, 29)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    tolerance = {"fp16": 1e-2, "fp32": 1e-5}[precision]
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    assert plan.generic_steps > 0
    generic = [step.fn for step in plan.steps]
    first = sess.run(x)["y"]
    assert rel_err(first, want) <= tolerance
    second = sess.run(x)["y"]  # (a CUDA graph, of generic kernels unless switched already)
    assert rel_err(second, want) <= tolerance
    assert plan.upgrade(wait=True)
    init = sess.profile()["partitions"][0]["init"]
    assert init["generic_left"] == 0 and init["upgraded_s"] is not None
    assert [step.fn for step in plan.steps] != generic
    for _ in range(3):  # the first run launches, the next capture and replay a graph
        assert rel_err(sess.run(x)["y"], want) <= tolerance
    assert plan.graphs
    again = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    assert only_plan(kernel_of(again, "cuda")).generic_steps == 0
    assert rel_err(again.run(x)["y"], want) <= tolerance


def _activation_nodes(kind: str, x: str, y: str, inits: dict, oc: int, rng) -> list:
    """Nodes applying activation `kind` to x into y (SiLU as x * Sigmoid(x)); their constant
    inputs added to `inits`."""
    if kind == "SiLU":
        return [Node("Sigmoid", [x], [y + "_s"]), Node("Mul", [x, y + "_s"], [y])]
    if kind == "PRelu":
        inits[y + "_slope"] = rng.uniform(0.05, 0.5, (oc, 1, 1)).astype(np.float32)
        return [Node("PRelu", [x, y + "_slope"], [y])]
    if kind == "Clip":  # (no lower bound: an absent input)
        inits[y + "_max"] = np.array(0.7, np.float32)
        return [Node("Clip", [x, "", y + "_max"], [y])]
    attrs = {"HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "LeakyRelu": {"alpha": 0.15}}
    return [Node(kind, [x], [y], attrs.get(kind, {}))]


@pytest.mark.parametrize(
    "kind",
    ["Relu", "Clip", "LeakyRelu", "PRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "SiLU"],
)
@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_generic_kernels_take_each_fused_activation_at_launch(kind, depthwise, precision, rng):
    """The generic convolution kernels (tensor cores; CUDA cores for a depthwise one) apply
    each activation of the fusion table, coded at launch, before a fused residual and after
    it, as the layers' own kernels do: against the NumPy reference."""
    from tinydl.backends.cuda.context import FAST_COMPILE

    c = oc = 24
    group = c if depthwise else 1
    inits = {
        "w": (rng.standard_normal((oc, c // group, 3, 3)) / np.sqrt(9 * c // group)).astype(
            np.float32
        ),
        "b": rng.standard_normal(oc).astype(np.float32),
    }
    nodes = [Node("Conv", ["x", "w", "b"], ["c"], {"pads": [1] * 4, "group": group}, name="conv")]
    nodes += _activation_nodes(kind, "c", "a", inits, oc, rng)
    nodes.append(Node("Add", ["a", "r"], ["s"]))
    nodes += _activation_nodes("Tanh" if kind != "Tanh" else "Relu", "s", "y", inits, oc, rng)
    graph = validate(
        Graph(
            [Value("x", "float32", (2, c, 13, 11)), Value("r", "float32", (2, oc, 13, 11))],
            [Value("y", "float32", None)],
            nodes,
            inits,
        )
    )
    feeds = {
        "x": rng.standard_normal((2, c, 13, 11)).astype(np.float32),
        "r": rng.standard_normal((2, oc, 13, 11)).astype(np.float32),
    }
    want = td.compile(graph, backends=("numpy",)).run(feeds)["y"]
    sess = td.compile(
        graph, backends=("cuda",), precision=precision, strict=True,
        backend_options={"cuda": {"generic_kernels": "only"}},
    )  # fmt: skip
    got = sess.run(feeds)["y"]
    plan = only_plan(kernel_of(sess, "cuda"))
    convs = [s for s in plan.steps if "convolution" in s.deferred.source]
    assert convs and all(FAST_COMPILE in s.deferred.source for s in convs)
    assert all("act_at" in s.deferred.source for s in convs if s.deferred.entry != "zero")
    assert len(plan.steps) <= 3  # (the activations fused: a conv, maybe a split's two more)
    assert rel_err(got, want) <= {"fp16": 1e-2, "fp32": 1e-5}[precision]


def test_espcn_fp32_matches_cpu(tmp_path, rng):
    graph = espcn(tmp_path, rng)
    y = rng.random((2, 1, 37, 53), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"y": y})["out"]
    got = td.compile(graph, backends=("cuda",), strict=True).run({"y": y})["out"]
    assert rel_err(got, want) <= 1e-5


# -- real models ---------------------------------------------------------------------------------


def test_ppocrv4_rec_matches_onnxruntime(rapidocr_models, rng):
    import onnxruntime as ort

    path = rapidocr_models / "ch_PP-OCRv4_rec_infer.onnx"
    x = rng.random((1, 3, 48, 320), dtype=np.float32)
    (ref,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    sess = td.compile(td.load(path), backends=("cuda",), strict=True)
    (got,) = sess.run({"x": x}).values()
    assert rel_err(got, ref) <= 1e-4


# -- graphs, device tensors, DLPack ----------------------------------------------------------------


def test_device_tensors_in_and_out(rng):
    sess = td.compile(small_graph(), backends=("cuda",), strict=True)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    out = sess.run({"x": x}, outputs="device")["y"]
    assert isinstance(out, cp.ndarray) and out.shape == (4, 4)
    np.testing.assert_allclose(out.get(), small_reference(x), rtol=1e-6)
    again = sess.run({"x": out.reshape(2, 8)}, outputs="device")["y"]
    np.testing.assert_allclose(
        again.get(), small_reference(small_reference(x).reshape(2, 8)), rtol=1e-6
    )


def test_graph_replay_keeps_held_outputs(rng):
    """Replays reuse a graph's output buffers only when the caller has let go of them."""
    sess = td.compile(small_graph(), backends=("cuda",), strict=True)
    xs = [cp.asarray(rng.standard_normal((2, 8)).astype(np.float32)) for _ in range(4)]
    feed = cp.empty((2, 8), cp.float32)
    held = []
    for x in xs:
        feed[...] = x  # the same input buffer every run: one graph per output set
        held.append(sess.run({"x": feed}, outputs="device")["y"])
    for x, y in zip(xs, held, strict=True):
        np.testing.assert_allclose(y.get(), small_reference(x.get()), rtol=1e-6)
    plan = only_plan(kernel_of(sess, "cuda"))
    # First run eager, then one graph per held output set.
    assert sum(len(g) for g in plan.graphs.values()) == 3
    held.clear()
    for x in xs:
        feed[...] = x
        y = sess.run({"x": feed}, outputs="device")["y"]
        np.testing.assert_allclose(y.get(), small_reference(x.get()), rtol=1e-6)
        del y
    assert sum(len(g) for g in plan.graphs.values()) == 3


def test_torch_tensors_pass_by_dlpack(rng):
    torch = pytest.importorskip("torch")
    sess = td.compile(small_graph(), backends=("cuda",), strict=True)
    x = torch.randn(2, 8, device="cuda")
    out = sess.run({"x": x}, outputs="device")["y"]
    back = torch.from_dlpack(out)
    assert back.device.type == "cuda"
    np.testing.assert_allclose(back.cpu().numpy(), small_reference(x.cpu().numpy()), rtol=1e-6)


def test_profile_reports_ops_and_init(tmp_path, rng):
    sess = td.compile(espcn(tmp_path, rng), backends=("cuda",), profile=True)
    sess.run({"y": rng.random((1, 1, 36, 64), dtype=np.float32)})
    report = sess.profile()
    assert [op["op"] for op in report["ops"]], "per-op GPU times"
    assert all(op["seconds"] > 0 for op in report["ops"])
    init = report["partitions"][0]["init"]
    assert {"compile_s", "plan_s", "weights_s", "first_run_s"} <= set(init)


def test_kernels_are_cached_on_disk(tmp_path, monkeypatch, rng):
    """A fresh process loads compiled kernels from the cache instead of compiling them."""
    import subprocess
    import sys
    import textwrap

    monkeypatch.setenv("TINYDL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TINYDL_SESSION_CACHE", "off")  # (else the session is read back whole)
    code = textwrap.dedent(
        """
        import numpy as np, tinydl as td
        from helpers.models import small_graph
        from tinydl.backends.cuda.context import get_context
        sess = td.compile(small_graph(), backends=("cuda",))
        sess.run({"x": np.ones((2, 8), np.float32)})
        plans = [p for part in sess.partitions for p in part.kernel.plans.values()]
        generic = sum(p.generic_steps for p in plans)
        assert all(p.upgrade(wait=True) for p in plans)  # (its own kernels compiled)
        s = get_context().stats
        print(generic, s["compiled"], s["cache_hits"])
        """
    )
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd="tests", check=True
        )
        runs.append(tuple(int(v) for v in out.stdout.split()[-3:]))
    (generic1, compiled1, hits1), (generic2, compiled2, hits2) = runs
    assert compiled1 > 0 and hits1 == 0 and generic1 > 0
    # (the first also compiled the generic kernels it ran while its own compiled; the second
    # runs its own from the start)
    assert compiled2 == 0 and 0 < hits2 < compiled1 and generic2 == 0


# -- the superres frame path -----------------------------------------------------------------------


@pytest.mark.parametrize(("precision", "levels"), [("fp32", 1), ("fp16", 4)])
def test_superres_frame_path_runs_whole_on_cuda(rng, precision, levels):
    """u8 frames in, u8 frames out, every node on the GPU; within `levels` of the cpu result."""
    from tinydl.apps.superres import Upscaler

    frames = rng.integers(0, 256, (2, 48, 80, 3), dtype=np.uint8)
    cpu = Upscaler(3, backend="numpy")(frames).astype(int)
    up = Upscaler(3, backend="cuda", precision=precision)
    refused = up.session.placement.refusals
    assert set(up.session.placement.nodes.values()) == {"cuda"}, refused
    diff = np.abs(up(frames).astype(int) - cpu)
    assert diff.max() <= levels and diff.mean() < 0.05


# -- residual adds in the conv epilogue ------------------------------------------------------------


def residual_graph(rng, late: bool) -> Graph:
    """x -> Conv -> Relu -> Add(., r) -> Relu, with r = x (computed before the conv) or, when
    `late`, r = Sigmoid(x) placed after the conv in the node order."""
    w = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    b = (rng.standard_normal(8) * 0.1).astype(np.float32)
    nodes = [
        Node("Conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}, name="conv"),
        Node("Relu", ["c"], ["a"], name="relu1"),
    ]
    r = "x"
    if late:
        nodes.append(Node("Sigmoid", ["x"], ["s"], name="sig"))
        r = "s"
    nodes.append(Node("Add", ["a", r], ["sum"], name="add"))
    nodes.append(Node("Relu", ["sum"], ["y"], name="relu2"))
    return validate(
        Graph(
            inputs=[Value("x", "float32", (2, 8, 13, 21))],
            outputs=[Value("y", "float32", None)],
            nodes=nodes,
            initializers={"w": w, "b": b},
        )
    )


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_residual_add_fused_into_conv(rng, late, precision):
    graph = residual_graph(rng, late)
    x = rng.standard_normal((2, 8, 13, 21)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    got = sess.run({"x": x})["y"]
    labels = [n.meta.get("label", n.op) for n in only_plan(kernel_of(sess, "cuda")).nodes]
    assert any("Add" in label and "Conv" in label for label in labels) == (not late), labels
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize("activation", ["Relu", "Clip", "Sigmoid"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shared", [False, True])
def test_batch_norm_and_activation_are_one_kernel(rng, activation, precision, shared):
    graph = bn_activation_graph(rng, activation, shared)
    x = rng.standard_normal((2, 6, 9, 11)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    got = sess.run({"x": x})
    labels = [n.meta.get("label", n.op) for n in only_plan(kernel_of(sess, "cuda")).nodes]
    assert (f"BatchNormalization+{activation}" in labels) == (not shared), labels
    for name in want:
        assert rel_err(got[name], want[name]) <= (1e-5 if precision == "fp32" else 1e-2), name


def test_elementwise_run_is_one_launch(rng):
    check_elementwise_run(rng, "cuda")


# -- batches from host frames --------------------------------------------------------------------


@pytest.mark.parametrize("pinned", [False, True])
def test_stack_to_device_matches_concatenate(rng, pinned):
    """Frames copied one by one into their places of one device batch, from pageable or
    page-locked memory. The copies may still be in flight when the call returns, so the
    context holds the frames themselves until its stream has done them (a pool sees them in
    use and does not hand them out again); once done, rewriting a frame leaves the batch as
    it is. (Rewriting a frame the caller still holds before the stream is done is the
    caller's race: the test did that once and failed under load.)"""
    from tinydl.backends.cuda.context import get_context

    shapes = [(1, 37, 53, 3), (2, 37, 53, 3), (1, 37, 53, 3)]
    frames = []
    for shape in shapes:
        a = BACKEND.empty_host(shape, np.uint8) if pinned else np.empty(shape, np.uint8)
        a[...] = rng.integers(0, 256, shape, dtype=np.uint8)
        frames.append(a)
    want = np.concatenate(frames)
    got = BACKEND.stack_to_device(frames)
    _, kept = get_context()._kept[-1]
    assert all(any(k is a for k in kept) for a in frames)  # held until copied
    cp.cuda.get_current_stream().synchronize()
    for a in frames:
        a[...] = 0  # as a source reusing its frames would
    assert isinstance(got, cp.ndarray) and got.shape == want.shape
    np.testing.assert_array_equal(got.get(), want)


def test_stack_to_device_refuses_mixed_frames(rng):
    a = rng.random((1, 4, 4), dtype=np.float32)
    with pytest.raises(td.InvalidInputError, match="array 1 is float32\\[1, 4, 5\\]"):
        BACKEND.stack_to_device([a, rng.random((1, 4, 5), dtype=np.float32)])


def test_session_stacks_a_batch_on_the_device(rng):
    """Session.stack_input makes the batch where the model runs; results match a host batch."""
    sess = td.compile(small_graph(), backends=("cuda",), strict=True)
    parts = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(2)]
    x = sess.stack_input("x", parts)
    assert isinstance(x, cp.ndarray)
    got = sess.run({"x": x})["y"]
    np.testing.assert_allclose(got, small_reference(np.concatenate(parts)), rtol=1e-6)


def test_pipeline_frames_are_page_locked_for_a_cuda_inference():
    """A thread app whose Inference runs on cuda gets its sources' frames in page-locked
    memory, and the device batches it makes hold exactly those frames."""
    from helpers.pipeline import batched_app

    from tinydl.pipeline import components
    from tinydl.pipeline.packet import Batch, Frame

    kinds, sums = [], []

    class Check(components.Inference):
        def process(self, ctx, inputs):
            frames = inputs["in"].payload.payloads()
            for f in frames:
                assert isinstance(f, Frame)
                attrs = cp.cuda.runtime.pointerGetAttributes(f.image.ctypes.data)
                kinds.append(attrs.type)
            out = super().process(ctx, inputs)["out"]
            for f, d in zip(frames, out.payloads(), strict=True):
                sums.append((int(f.image.sum()), int(d.data.sum(dtype=cp.float64))))
            return {"out": out}

    graph = Graph(
        inputs=[Value("x", "uint8", ("n", 24, 32, 3))],
        outputs=[Value("y", "float32", None)],
        nodes=[Node("Cast", ["x"], ["y"], {"to": 1})],
    )
    infer = Check(graph, backends="cuda", normalize=False, layout="NHWC", output_as="device")
    source = components.SyntheticSource(count=6, width=32, height=24)
    app, out = batched_app("pinned", source, infer, 4, sources=2)
    report = app.run(timeout=60)
    assert report.balanced and report.frames_out == 12, report.accounting()
    assert kinds and set(kinds) == {cp.cuda.runtime.memoryTypeHost}
    assert len(sums) == 12 and all(a == b for a, b in sums), sums
    assert not isinstance(out.packets[0].payload, Batch)


def test_process_worker_page_locks_the_frame_blocks_it_uploads():
    """A GPU stage in a worker process maps the app's shared-memory frame blocks and page-locks
    them (cudaHostRegister), so a batch uploads asynchronously; every frame arrives whole and
    in time though its block is reused as soon as the call returns."""
    from helpers.pipeline import PoolFrames, StackOnGPU, batched_app

    source = PoolFrames(n=48, height=90, width=160)
    app, out = batched_app("locked", source, StackOnGPU("cuda"), 8, executor="process")
    report = app.run(timeout=120)
    assert report.balanced and report.frames_out == 48, report.accounting()
    rows = sorted(tuple(p.payload.data) for p in out.packets)
    assert [int(r[0]) for r in rows] == list(range(48))
    assert all(r[1] == (int(r[0]) % 251) * 90 * 160 * 3 for r in rows), rows
    assert all(r[2] == 1.0 for r in rows), "frames read from pageable memory"


def test_inference_in_flight_copies_outputs_back_asynchronously():
    """Inference with in_flight 2 on cuda: the run and the copy of its output to page-locked
    memory are only enqueued (`to_host_later`); batches of frames through the app give the
    same outputs as with in_flight 1, in order."""
    from tinydl.pipeline import App
    from tinydl.pipeline.components import Batch, Collect, Inference, SyntheticSource, Unbatch

    host, wait = BACKEND.to_host_later(cp.arange(12, dtype=cp.float32).reshape(3, 4) * 2)
    wait()
    np.testing.assert_array_equal(host, np.arange(12, dtype=np.float32).reshape(3, 4) * 2)
    results = []
    for in_flight in (1, 2):
        app = App(f"infer{in_flight}")
        app.add("src", SyntheticSource(count=24, width=64, height=36))
        app.add("batch", Batch(max_size=4, max_wait=0.01))
        app.add(
            "sr",
            Inference(model="tinydl:espcn_x3", backends="cuda", channels=[0], output_as="tensor"),
            in_flight=in_flight,
        )
        app.add("unbatch", Unbatch())
        out = Collect()
        app.add("out", out)
        for a, b in [("src", "batch"), ("batch", "sr"), ("sr", "unbatch"), ("unbatch", "out")]:
            app.connect(a, b)
        report = app.run(timeout=120)
        assert report.balanced and report.frames_out == 24, report.errors
        results.append([p.payload.data for p in out.packets])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
@pytest.mark.parametrize("nbytes", [4, 4096, 1 << 20, 2 << 20, (5 << 20) + 24, 9 << 20])
def test_uploads_through_page_locked_buffers_arrive_whole(dtype, nbytes, rng):
    """Context.upload: through two page-locked buffers in turn — a few bytes, exact multiples
    of a buffer, a partial last one, several rounds of the two — each a copy of the host array,
    bit for bit, from a read-only view too."""
    from tinydl.backends.cuda.context import get_context

    n = max(1, nbytes // np.dtype(dtype).itemsize)
    host = (rng.standard_normal(n) * 1000).astype(dtype)
    host.flags.writeable = False
    got = get_context().upload(host.reshape(-1, 2) if n % 2 == 0 else host)
    assert got.dtype == host.dtype and got.size == n
    np.testing.assert_array_equal(cp.asnumpy(got).reshape(-1), host)


@pytest.mark.parametrize("wait", [True, False])
def test_weights_split_into_tf32_parts_on_the_gpu_as_on_the_host(wait, rng):
    """Context.upload(split_tf32=True): float32 weights become big and small tf32 parts on the
    GPU (split_tf32.cu), bit for bit the parts conv.to_tf32 makes on the host — ties, the
    largest float32, subnormals, inf and NaN among random values of several magnitudes; waited
    for at once or with the rest of the uploads."""
    from tinydl.backends.cuda.context import get_context
    from tinydl.backends.cuda.kernels.conv import to_tf32

    ctx = get_context()
    edges = [1 + 2**-11, -(1 + 2**-11), 3.4028235e38, -3.4028235e38, 1e-40, -3e-39, 0.0, -0.0]
    edges += [np.inf, -np.inf, np.nan]
    got = []
    for n in (11, 4099, 300_001):
        w = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
        w[: len(edges)] = edges
        w = w.reshape(-1, 1) if n % 2 else w
        got.append((w, ctx.upload(w, wait=wait, split_tf32=True)))
    if not wait:
        ctx.wait_uploads()
    for w, parts in got:
        big = to_tf32(w)
        with np.errstate(invalid="ignore"):  # (inf - inf)
            small = to_tf32(w - big)
        assert parts.shape == (2, *w.shape) and parts.dtype == np.float32
        host = cp.asnumpy(parts)
        for part, want in ((host[0], big), (host[1], small)):
            nan = np.isnan(want)  # (a NaN's payload is the arithmetic's own, here and there)
            assert np.array_equal(np.isnan(part), nan)
            np.testing.assert_array_equal(part[~nan].view(np.uint32), want[~nan].view(np.uint32))
    with pytest.raises(TypeError, match="float32"):
        ctx.upload(np.zeros(4, np.float16), split_tf32=True)


def test_uploads_left_in_flight_all_arrive_after_waiting(rng):
    """Many uploads without waiting (as a session read back makes its constants), small ones
    sharing a buffer and large ones taking turns, then one wait: every array whole."""
    from tinydl.backends.cuda.context import get_context

    ctx = get_context()
    sizes = [3, 1000, 70_000, 600_000, 5, 2_000_000, 17, 300_000, 1_100_000, 9]
    hosts = [rng.standard_normal(k).astype(np.float32) for k in sizes]
    got = [ctx.upload(h, wait=False) for h in hosts]
    ctx.wait_uploads()
    for h, g in zip(hosts, got, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(g), h)


@pytest.mark.parametrize(
    "op,shape,oc,k,attrs,tail,precision",
    [("Conv", *case) for case in CONV3D_CASES]
    + [("ConvTranspose", *case) for case in CONV_TRANSPOSE3D_CASES],
)
def test_3d_convolutions_match_numpy(rng, op, shape, oc, k, attrs, tail, precision):
    """3-D convolutions (helpers.models.CONV3D_CASES: BatchNormalization, activations, a PRelu
    and R3D's residual Add and Relu in the epilogue; groups, dilations, strides, uneven
    padding; fp16) and ConvTranspose (CONV_TRANSPOSE3D_CASES: strides, padding and output
    padding; groups with a dilation, BatchNormalization and Relu; a PRelu at fp16) as one
    conv3d.cu launch each (a ConvTranspose its gather), against NumPy."""
    graph = conv3d_graph(rng, shape, oc, k, attrs, tail, op=op)
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    got = sess.run(x)["y"]
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    (step,) = only_plan(kernel_of(sess, "cuda")).steps
    kind = "3-D transposed convolution" if op == "ConvTranspose" else "3-D convolution"
    assert f"{kind}, NCDHW" in step.deferred.source
