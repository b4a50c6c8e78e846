"""precision="auto": the fp16 / float32 storage decision (tinydl.runtime.precision), made by
emulating fp16 storage on the NumPy reference, on a graph built to break in fp16 and on real
models; the session options around it. The GPU backends honouring the decision are tested in
test_gpu.py."""

import numpy as np
import pytest
from helpers.models import fp16_fragile_graph, ocr_input, page_image

import tinydl as td
from tinydl.errors import InvalidInputError
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate
from tinydl.runtime.precision import DEFAULT_TOLERANCE, decide


def test_overflow_and_cancellation_stay_in_float32():
    graph = fp16_fragile_graph()
    d = decide(graph)
    assert d.overflow == ["big"]  # ~1e5 on [0, 1) inputs: past fp16's 65,504
    assert set(d.fp32) == {"big", "shifted"}  # "shifted" ~1000 + x: fp16 drops x's detail
    assert set(d.fp16) == {"scaled", "act", "hidden", "squashed", "back"}
    assert d.fp16_error > 0.5 and d.error <= DEFAULT_TOLERANCE
    assert d.nodes()["big"] == "fp32" and d.nodes()["hidden"] == "fp16"
    assert "5 of 7 values in fp16" in d.summary()


def test_tolerance_decides_how_much_stays_in_float32():
    graph = fp16_fragile_graph()
    loose, tight = decide(graph, tolerance=0.5), decide(graph, tolerance=1e-5)
    assert set(loose.fp32) == {"big"}  # overflow always stays; cancellation is within 0.5
    assert len(tight.fp32) > 2 and tight.error <= 1e-5


def test_a_model_fine_in_fp16_is_all_fp16():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32) * 0.2
    nodes = [
        Node("MatMul", ["x", "w"], ["a"], name="a"),
        Node("Relu", ["a"], ["b"], name="b"),
        Node("MatMul", ["b", "w"], ["y"], name="y"),
    ]
    graph = validate(
        Graph([Value("x", "float32", (2, 16))], [Value("y", "float32", (2, 16))], nodes, {"w": w})
    )
    d = decide(graph)
    assert d.fp32 == [] and d.fp16 == ["a", "b"] and d.error == d.fp16_error <= 1e-2


def test_calibration_inputs():
    graph = fp16_fragile_graph()
    x = np.random.default_rng(1).random((4, 64), dtype=np.float32)
    given = decide(graph, {"x": x})
    assert set(given.fp32) == {"big", "shifted"}
    several = decide(graph, [{"x": x}, {"x": x * 0.5}])
    assert set(several.fp32) >= {"big"}
    with pytest.raises(InvalidInputError, match="model's inputs"):
        decide(graph, {"image": x})
    with pytest.raises(InvalidInputError, match="positive"):
        decide(graph, tolerance=0)
    symbolic = Graph(
        [Value("x", "float32", ("n", 64))], graph.outputs, graph.nodes, graph.initializers
    )
    with pytest.raises(InvalidInputError, match="needs calibration inputs"):
        decide(validate(symbolic))


def test_session_auto_options_and_result_on_the_cpu():
    graph = fp16_fragile_graph()
    x = np.random.default_rng(2).random((4, 64), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=("numpy",), precision="auto", fp16_tolerance=1e-3)
    assert sess.precision == "auto" and sess.precision_decision.tolerance == 1e-3
    assert "big" in sess.precision_decision.fp32
    assert sess.placement.precision["big"] == "fp32" and sess.placement.precision["act"] == "fp16"
    np.testing.assert_allclose(sess.run({"x": x})["y"], want)  # host backends stay float32
    with pytest.raises(InvalidInputError, match="goes with precision='auto'"):
        td.compile(graph, backends=("numpy",), fp16_tolerance=1e-3)
    with pytest.raises(InvalidInputError, match="precision must be one of"):
        td.compile(graph, precision="bf16")


def test_ppocr_det_keeps_most_values_in_fp16(rapidocr_models):
    """A real model that plain fp16 storage moves past the tolerance (3.7e-2 of the output's
    range on scikit-image's page): auto gets it within, most values still in fp16."""
    graph = td.compile(td.load(rapidocr_models / "ch_PP-OCRv4_det_infer.onnx")).graph
    x = ocr_input(page_image(), 384, 192)
    d = decide(graph, {graph.inputs[0].name: x})
    assert d.fp16_error > DEFAULT_TOLERANCE >= d.error
    assert len(d.fp16) > len(d.fp32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1e-8, 1e-5, 0.02, 1.0, 3e4])
def test_to_half_is_numpys_conversion_bit_for_bit(rng, dtype, scale):
    """The fast fp16 conversion (weights for fp16 storage, split weights' low parts) equals
    NumPy's astype bit for bit: subnormals, ties, signed zeros, overflow, NaN."""
    from tinydl.backends.base import to_half

    x = (rng.standard_normal(20_000) * scale).astype(dtype)
    edges = [0.0, -0.0, 2.0**-25, -3 * 2.0**-25, 2.0**-14 - 2.0**-30, -(2.0**-24) / 2, 65520.0]
    x[: len(edges) + 1] = [*edges, np.nan]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
        got = to_half(x)
    assert got.dtype == np.float16 and got.shape == x.shape
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
