"""Every op and attribute variant against onnxruntime, on fresh random inputs (the cases are in
helpers/cases.py, the checker in helpers/opcheck.py)."""

import numpy as np
import pytest
from helpers.cases import CASES, N, draw, f32, i64
from helpers.opcheck import check_op

from tinydl.errors import InvalidModelError
from tinydl.ir.graph import Node
from tinydl.ops import TensorType, schema_of
from tinydl.ops import conv as conv_module
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


def test_batch_norm_training_mode_rejected():
    c = f32_type(3)
    with pytest.raises(ValueError, match="training_mode=1 is not supported"):
        infer("BatchNormalization", f32_type(1, 3, 4, 4), c, c, c, c, training_mode=1)


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
    assert infer("Reshape", x, runtime_i64)[0].shape is None
    assert infer("Slice", x, runtime_i64, runtime_i64)[0].shape == (None, None, None)
    assert infer("Resize", x, None, None, TensorType("int64", (3,)))[0].shape == (None,) * 3


def test_reshape_mismatch_fails():
    with pytest.raises(InvalidModelError, match="cannot reshape"):
        infer("Reshape", f32_type(2, 3, 4), TensorType("int64", (2,), i64(5, -1)))


def test_shape_value_is_known_when_its_dims_are():
    (y,) = infer("Shape", f32_type("N", 3, 4, 5), start=1)
    assert y.shape == (3,) and y.value.tolist() == [3, 4, 5]
    assert infer("Shape", f32_type("N", 3))[0].value is None
