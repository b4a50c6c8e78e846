"""Every op and attribute variant against onnxruntime, on fresh random inputs (the cases are in
helpers/cases.py, the checker in helpers/opcheck.py)."""

import numpy as np
import pytest
from helpers.cases import CASES, N, U, draw, f32, i64
from helpers.opcheck import check_op

from tinydl.errors import InvalidModelError
from tinydl.ir.graph import Node
from tinydl.ops import TensorType, schema_of
from tinydl.ops import conv as conv_module
from tinydl.ops.activation import ACTIVATION_OPS, ACTIVATIONS, activation_params, check_covers
from tinydl.ops.base import InferContext


@pytest.mark.parametrize(("op", "inputs", "attrs", "consts", "rtol", "atol"), CASES)
def test_op(op, inputs, attrs, consts, rtol, atol, request):
    arrays, attrs = draw(request.node.callspec.id, inputs, attrs)
    check_op(dict(op=op, inputs=arrays, attrs=attrs, consts=consts), rtol=rtol, atol=atol)


def test_conv_im2col_in_blocks(monkeypatch):
    """A tiny im2col budget makes Conv build its columns a row or two at a time."""
    monkeypatch.setattr(conv_module, "_IM2COL_BYTES", 4096)
    rng = np.random.default_rng(7)
    x, w = N(2, 3, 13, 10).draw(rng), N(4, 3, 3, 3).draw(rng)
    check_op(dict(op="Conv", inputs={"x": x, "w": w}, attrs={"pads": [1] * 4}, consts={"w"}))


# -- shape inference and rejected variants --------------------------------------------------------


def infer(op, *inputs, outputs=("y",), **attrs):
    """Run an op's shape inference on TensorTypes (None for an omitted input)."""
    names = [f"i{k}" if t else "" for k, t in enumerate(inputs)]
    node = Node(op, names, list(outputs), attrs, name="n")
    schema = schema_of(op)
    node.attrs = schema.check_attrs(node)
    return schema.infer(InferContext(node, node.attrs, list(inputs)))


def f32_type(*shape, value=None):
    return TensorType("float32", shape, value)


def test_conv_channel_mismatch_names_expected_and_got():
    with pytest.raises(InvalidModelError, match="expected 6 input channels, got 4"):
        infer("Conv", f32_type(1, 4, 8, 8), f32_type(8, 3, 3, 3), group=2)


def test_conv_symbolic_dims():
    (y,) = infer(
        "Conv", f32_type("N", 3, "H", 32), f32_type(8, 3, 3, 3), strides=[2, 2], pads=[1] * 4
    )
    assert y.shape == ("N", 8, None, 16)


@pytest.mark.parametrize(
    ("op", "x", "shape_len", "rank"),
    [
        ("Reshape", ("b", "s"), 3, 3),
        ("Expand", (1, "s", 1), 4, 4),
        ("Expand", (2, "s", 5), 2, 3),
        ("Unsqueeze", ("b", "s"), 2, 4),
        ("Squeeze", ("b", 1, "s", 1), 2, 2),
    ],
)
def test_a_shape_computed_at_run_time_still_gives_the_rank(op, x, shape_len, rank):
    """Reshape, Expand, Unsqueeze and Squeeze whose shape or axes are computed at run time
    (from a symbolic dim: transformers exported with dynamic axes) know the output's rank from
    that input's length, so ops that need a rank (LayerNormalization on the GPU backends) are
    not refused. Before, the rank was unknown and GPT-2's and BERT's LayerNormalizations fell
    back to the CPU."""
    shape = TensorType("int64", (shape_len,))
    (y,) = infer(op, TensorType("float32", x), shape)
    assert y.shape is not None and len(y.shape) == rank
    assert infer(op, TensorType("float32", x), TensorType("int64", ("k",)))[0].shape is None


def test_batch_norm_training_mode_uses_the_batch_statistics():
    """training_mode=1 (timm's weight-standardized convolutions export so): y from the batch's
    mean and population variance over every axis but 1, and the running statistics
    mean * momentum + the batch's * (1 - momentum), as the ONNX reference computes them; no
    backend folds it as the inference form, and the GPU backends refuse it with the reason."""
    from tinydl.backends.fusion import bn_supports
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops.base import REGISTRY

    c = f32_type(3)
    y, m, v = infer("BatchNormalization", f32_type(2, 3, 4, 5), c, c, c, c, training_mode=1,
                    outputs=("y", "m", "v"))  # fmt: skip
    assert y.shape == (2, 3, 4, 5) and m.shape == v.shape == (3,)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, bias, mean, var = (rng.random(3).astype(np.float32) + 0.5 for _ in range(4))
    node = Node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                {"epsilon": 1e-3, "momentum": 0.8, "training_mode": 1})  # fmt: skip
    got = REGISTRY["BatchNormalization"].run(node, [x, scale, bias, mean, var])
    bm, bv = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    want = (x - bm[:, None, None]) / np.sqrt(bv[:, None, None] + 1e-3) * scale[:, None, None]
    np.testing.assert_allclose(got[0], want + bias[:, None, None], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], mean * 0.8 + bm * 0.2, rtol=1e-6)
    np.testing.assert_allclose(got[2], var * 0.8 + bv * 0.2, rtol=1e-6)
    graph = Graph([Value("x", "float32", (2, 3, 4, 5))], [Value("y")], [node],
                  {"s": scale, "b": bias, "m": mean, "v": var})  # fmt: skip
    support = bn_supports(node, graph)
    assert not support.ok and "training mode" in support.reason


def test_max_pool_indices_rejected():
    with pytest.raises(ValueError, match="Indices"):
        infer("MaxPool", f32_type(1, 3, 4, 4), outputs=("y", "i"), kernel_shape=[2, 2])


def test_cast_unsupported_code():
    with pytest.raises(ValueError, match="code 8"):
        infer("Cast", f32_type(2), to=8)


def test_resize_antialias_rejected():
    scales = f32_type(4, value=f32(1, 1, 0.5, 0.5))
    with pytest.raises(ValueError, match="antialias"):
        infer("Resize", f32_type(1, 3, 8, 8), None, scales, mode="linear", antialias=1)


def test_missing_constants_give_unknown_dims():
    x, runtime_i64 = f32_type(2, 3, 4), TensorType("int64", (2,))
    assert infer("Reshape", x, runtime_i64)[0].shape == (None, None)  # (the rank is known)
    assert infer("Slice", x, runtime_i64, runtime_i64)[0].shape == (None, None, None)
    assert infer("Resize", x, None, None, TensorType("int64", (3,)))[0].shape == (None,) * 3


def test_reshape_mismatch_fails():
    with pytest.raises(InvalidModelError, match="cannot reshape"):
        infer("Reshape", f32_type(2, 3, 4), TensorType("int64", (2,), i64(5, -1)))


def test_shape_value_is_known_when_its_dims_are():
    (y,) = infer("Shape", f32_type("N", 3, 4, 5), start=1)
    assert y.shape == (3,) and y.value.tolist() == [3, 4, 5]
    assert infer("Shape", f32_type("N", 3))[0].value is None


# -- the activation table -------------------------------------------------------------------------


@pytest.mark.parametrize("op", ACTIVATION_OPS)
def test_activation_table_matches_the_op(op):
    """The table's parameters of an op node and its reference give what the op gives."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 4)) * 4).astype(np.float32)
    constants = {"lo": f32(-0.5), "slope": U(3, 1).draw(rng)}
    extra = {"Clip": ["lo"], "PRelu": ["slope"]}.get(op, [])
    attrs = {"LeakyRelu": {"alpha": 0.3}}.get(op, {})
    node = Node(op, ["x", *extra], ["y"], schema_of(op).check_attrs(Node(op, [], [], attrs)))
    act = ACTIVATIONS[op]
    params = activation_params(node, constants.get)
    want = schema_of(op).run(node, [x, *(constants[n] for n in extra)])[0]
    got = act.apply(x, params, constants["slope"] if act.slope else None)
    np.testing.assert_array_equal(got, want)


def test_activation_params_refuse_computed_bounds_and_take_defaults():
    clip = Node("Clip", ["x", "lo", "hi"], ["y"], {})
    assert activation_params(clip, {"lo": f32(-1), "hi": f32(2)}.get) == {"min": -1.0, "max": 2.0}
    assert activation_params(clip, {"lo": f32(-1)}.get) is None  # hi is computed at run time
    assert activation_params(Node("Clip", ["x", "", "hi"], ["y"], {}), {"hi": f32(2)}.get) == {
        "min": None,
        "max": 2.0,
    }
    hard_sigmoid = Node("HardSigmoid", ["x"], ["y"], {"alpha": None, "beta": 0.25})
    assert activation_params(hard_sigmoid, {}.get) == {"alpha": 0.2, "beta": 0.25}


def test_check_covers_names_what_is_missing_unknown_or_both():
    snippets = dict.fromkeys(ACTIVATIONS, "")
    check_covers("full", snippets)
    check_covers("with a refusal", snippets.keys() - {"PRelu"}, {"PRelu": "no"})
    check_covers("ops", ACTIVATION_OPS, ops_only=True)
    with pytest.raises(RuntimeError, match=r"missing \['Tanh'\]"):
        check_covers("x", snippets.keys() - {"Tanh"})
    with pytest.raises(RuntimeError, match=r"unknown \['Gelu'\]"):
        check_covers("x", [*snippets, "Gelu"])
    with pytest.raises(RuntimeError, match=r"both \['Relu'\]"):
        check_covers("x", snippets, {"Relu": "no"})
    with pytest.raises(RuntimeError, match=r"unknown \['SiLU'\]"):
        check_covers("x", ACTIVATIONS, ops_only=True)


def test_conv_weights_fold_batchnorm_in_float64_and_come_as_given_without_one(rng):
    """`weights_and_bias` folds a BatchNormalization into float64 weights; with `as_given`, a
    convolution with none to fold gets its weights as they are (no float64 copy to pack from),
    one with one still folded in float64."""
    import types

    from tinydl.backends.fusion import weights_and_bias

    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    k, shift = rng.uniform(0.5, 2, 4), rng.standard_normal(4)

    def builder(meta):
        consts = {1: w, 2: bias}
        node = types.SimpleNamespace(meta=meta)
        return types.SimpleNamespace(node=node, const=consts.get, has=lambda i: i in consts)

    plain, b0 = weights_and_bias(builder({}), 0)
    assert plain.dtype == np.float64 and b0.dtype == np.float64
    np.testing.assert_array_equal(plain, w)
    given, _ = weights_and_bias(builder({}), 0, as_given=True)
    assert given is w
    for as_given in (False, True):
        folded, fb = weights_and_bias(builder({"bn": (k, shift)}), 0, as_given=as_given)
        assert folded.dtype == np.float64
        np.testing.assert_array_equal(folded, w.astype(np.float64) * k.reshape(-1, 1, 1, 1))
        np.testing.assert_array_equal(fb, bias.astype(np.float64) * k + shift)


def test_render_activation_skips_the_parts_of_an_absent_parameter():
    from tinydl.backends.fusion import render_activation

    snippets = {"Clip": ("lo({x}, {min})", "hi({x}, {max})"), "LeakyRelu": "lr({x}, {alpha})"}
    snippets["PRelu"] = "pr({x}, {slope})"

    def render(kind, params):
        return render_activation(snippets, kind, "v", params, lambda f: f"<{f}>")

    assert render("Clip", {"min": 1.0, "max": 2.0}) == "hi(lo(v, <1.0>), <2.0>)"
    assert render("Clip", {"max": 2.0}) == "hi(v, <2.0>)"
    assert render("Clip", {"min": 1.0, "max": None}) == "lo(v, <1.0>)"
    assert render("Clip", {}) == "v"
    assert render("LeakyRelu", {}) == "lr(v, <0.01>)"  # the default, from the schema
    assert render("PRelu", {"slope": "s[c]"}) == "pr(v, s[c])"


# -- recurrent layers: optional outputs and the batch-first layout --------------------------------


def recurrent_model(op, layout=0, outputs=("y", "y_h", "y_c"), seq=6, batch=3, size=4, hidden=5):
    """A bidirectional `op` with every input (lengths, initial states, LSTM's peepholes) and the
    named outputs ("" leaves one out), and its feeds; `layout` 1 is batch-first."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(len(op))  # the same weights in either layout
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    weights = {
        "w": N(2, gates * hidden, size, scale=0.5).draw(rng),
        "r": N(2, gates * hidden, hidden, scale=0.5).draw(rng),
        "b": N(2, 2 * gates * hidden, scale=0.5).draw(rng),
        "p": N(2, 3 * hidden, scale=0.5).draw(rng),
    }
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    shape = (batch, 2, hidden) if layout else (2, batch, hidden)
    feeds = {"x": N(*((batch, seq, size) if layout else (seq, batch, size))).draw(rng)}
    feeds["lens"] = rng.integers(1, seq + 1, batch).astype(np.int32)
    feeds |= {s: N(*shape).draw(rng) for s in states}
    inputs = ["x", "w", "r", "b", "lens", *states]
    if op == "LSTM":
        inputs.append("p")
    else:
        del weights["p"]
    outputs = list(outputs[: 3 if op == "LSTM" else 2])
    node = helper.make_node(
        op, inputs, outputs, hidden_size=hidden, direction="bidirectional", layout=layout
    )
    graph = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=10)
    return model, feeds


RECURRENT_OUTPUTS = [
    *[(op, ("y", "y_h", "y_c")) for op in ("LSTM", "GRU", "RNN")],
    *[(op, ("", "y_h", "y_c")) for op in ("LSTM", "GRU", "RNN")],
    ("LSTM", ("", "", "y_c")),
]


@pytest.mark.parametrize(("op", "outputs"), RECURRENT_OUTPUTS)
def test_recurrent_optional_outputs_match_onnxruntime(op, outputs):
    from helpers.opcheck import compare, run_onnxruntime, run_tinydl

    model, feeds = recurrent_model(op, outputs=outputs)
    got, want = run_tinydl(model, feeds), run_onnxruntime(model, feeds)
    assert (
        len(got) == len(want) == len([o for o in outputs[: len(model.graph.node[0].output)] if o])
    )
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        compare(g, w, 1e-5, 1e-6, f"output {i}")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_batch_first_layout_matches_onnxruntime_on_the_sequence_first_model(op):
    """onnxruntime's CPU provider has no layout=1 kernels: its layout 0 on transposed inputs is
    the judge."""
    from helpers.opcheck import compare, run_onnxruntime, run_tinydl

    model, feeds = recurrent_model(op, layout=1)
    got = run_tinydl(model, feeds)
    seq_first, _ = recurrent_model(op, layout=0)
    moved = {k: v if k == "lens" else np.swapaxes(v, 0, 1) for k, v in feeds.items()}
    want = run_onnxruntime(seq_first, moved)
    compare(got[0], want[0].transpose(2, 0, 1, 3), 1e-5, 1e-6, "Y")
    for i in range(1, len(want)):
        compare(got[i], want[i].transpose(1, 0, 2), 1e-5, 1e-6, f"state output {i}")


def test_recurrent_bad_attributes_are_named():
    x, w, r = f32_type(5, 3, 4), f32_type(1, 24, 4), f32_type(1, 24, 6)
    with pytest.raises(InvalidModelError, match="direction must be one of"):
        infer("LSTM", x, w, r, direction="sideways")
    with pytest.raises(ValueError, match="3 function"):
        infer("LSTM", x, w, r, activations=["Sigmoid", "Tanh"])
    with pytest.raises(ValueError, match="unknown activation 'Gelu'"):
        infer("RNN", x, f32_type(1, 6, 4), f32_type(1, 6, 6), activations=["Gelu"])
    with pytest.raises(InvalidModelError, match="W has 1 direction"):
        infer("LSTM", x, w, r, direction="bidirectional")


def test_non_max_suppression_row_count_is_left_to_the_data():
    boxes, scores = f32_type("B", "N", 4), f32_type("B", 2, "N")
    (y,) = infer("NonMaxSuppression", boxes, scores)
    assert y.shape == (None, 3) and y.dtype == "int64"
    with pytest.raises(InvalidModelError, match=r"boxes must be \[batch, boxes, 4\]"):
        infer("NonMaxSuppression", f32_type(1, 5, 5), f32_type(1, 2, 5))


# -- older opsets' forms, rewritten by the importer; outputs the shared cases do not request -----


def _against_onnxruntime(spec: dict, rtol=1e-5, atol=1e-5) -> None:
    from helpers.opcheck import compare, node_model, run_onnxruntime, run_tinydl

    model, feeds = node_model(**spec)
    want = run_onnxruntime(model, feeds)
    got = run_tinydl(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        compare(g, w, rtol, atol, f"output {i}")


@pytest.mark.parametrize(
    ("op", "opset", "attrs"),
    [
        ("ReduceSum", 11, {"axes": [0, -1], "keepdims": 0}),
        ("ReduceMax", 13, {"axes": [1]}),
        ("ReduceLogSumExp", 17, {"axes": [-2]}),
        ("ReduceL2", 11, {}),
    ],
)
def test_reduce_axes_attribute(op, opset, attrs):
    x = N(3, 4, 5).draw(np.random.default_rng(1))
    _against_onnxruntime(dict(op=op, inputs={"x": x}, attrs=attrs, opset=opset))


@pytest.mark.parametrize("axis", [1, -1])
def test_log_softmax_before_opset_13_flattens_at_axis(axis):
    x = N(2, 3, 4, scale=3).draw(np.random.default_rng(2))
    _against_onnxruntime(dict(op="LogSoftmax", inputs={"x": x}, attrs={"axis": axis}, opset=11))


def test_group_normalization_opset_18_scales_per_group():
    rng = np.random.default_rng(3)
    x, s, b = N(2, 6, 5, 4).draw(rng), N(3).draw(rng), N(3).draw(rng)
    spec = dict(
        op="GroupNormalization",
        inputs={"x": x, "s": s, "b": b},
        attrs={"num_groups": 3, "epsilon": 1e-3},
        consts={"s", "b"},
        opset=18,
    )
    _against_onnxruntime(spec, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_layer_normalization_mean_and_inv_std_dev(dtype):
    rng = np.random.default_rng(4)
    x, s, b = (N(*shape, dtype=dtype).draw(rng) for shape in ((2, 3, 40), (3, 40), (3, 40)))
    tol = 1e-5 if dtype == np.float32 else 1e-2
    inputs = {"x": x, "s": s, "b": b}
    got = check_op(
        dict(op="LayerNormalization", inputs=inputs, attrs={"axis": 1}, outputs=3),
        rtol=tol,
        atol=tol,
    )
    assert [g.dtype for g in got] == [dtype, np.float32, np.float32]
    assert got[1].shape == got[2].shape == (2, 1, 1)


def test_topk_k_beyond_the_axis_is_refused():
    with pytest.raises(ValueError, match="outside 0..5"):
        infer("TopK", f32_type(3, 5), TensorType("int64", (1,), i64(6)), outputs=("v", "i"))


def test_group_normalization_groups_must_divide_channels():
    c = f32_type(6)
    with pytest.raises(InvalidModelError, match="6 channels do not divide into 4 groups"):
        infer("GroupNormalization", f32_type(1, 6, 3), c, c, num_groups=4)


@pytest.mark.parametrize(
    "mode,rank", [("linear", 2), ("linear", 3), ("nearest", 2), ("nearest", 3), ("cubic", 2)]
)
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_onnx_reference(mode, rank, padding_mode, align_corners):
    """GridSample (RAFT's and spatial transformers' resampling) against onnx's reference on a
    grid reaching well past [-1, 1] (several reflections), 2-D and 3-D (ONNX's cubic is 2-D)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from tinydl.ir.graph import Node
    from tinydl.ops.base import REGISTRY

    rng = np.random.default_rng(rank * 7 + align_corners)
    dims = (5, 4) if rank == 2 else (3, 4, 5)
    x = rng.standard_normal((2, 3, *dims)).astype(np.float32)
    grid = (3 * rng.random((2, *(3,) * rank, rank)) - 1.5).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    want = ReferenceEvaluator(node).run(None, {"x": x, "grid": grid})[0]
    got = REGISTRY["GridSample"].run(Node("GridSample", ["x", "grid"], ["y"], attrs), [x, grid])
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_roi_align_in_chunks_of_rois_per_image():
    """RoiAlign (avg) as matrix products over chunks of rois of one image at a time (more rois
    than a chunk, two images, unsorted batch indices) equals the separable sum written out."""
    from tinydl.ops import detection

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 23, 31)).astype(np.float32)
    n = detection.ROI_CHUNK * 2 + 7
    rois = rng.random((n, 4)).astype(np.float32) * 60
    rois[:, 2:] = rois[:, :2] + rng.random((n, 2)).astype(np.float32) * 40 + 1
    batch = rng.integers(0, 2, n).astype(np.int64)
    kw = dict(mode="avg", output_height=3, output_width=4, sampling_ratio=0, spatial_scale=0.5,
              coordinate_transformation_mode="half_pixel")  # fmt: skip
    got = detection.roi_align(x, rois, batch, **kw)
    for i in (0, n // 2, n - 1):  # each roi alone is the same sum
        one = detection.roi_align(x, rois[i : i + 1], batch[i : i + 1], **kw)
        np.testing.assert_allclose(got[i : i + 1], one, rtol=1e-6, atol=1e-6)
    want = run_reference_roi_align(x, rois, batch, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def run_reference_roi_align(x, rois, batch, **kw):
    """onnx's own reference implementation of RoiAlign."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **kw)
    f, i = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info(n, t, None) for n, t in
              (("x", f), ("rois", f), ("batch", i))]  # fmt: skip
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", f, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    return ReferenceEvaluator(model).run(None, {"x": x, "rois": rois, "batch": batch})[0]
