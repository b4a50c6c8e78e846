"""Session API: compile, run, input validation, placement and fallback reporting."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers.fakes import FakeBackend, FakeGPU

import tinydl as td
from tinydl.backends import register_backend, unregister_backend
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate


def small_graph() -> Graph:
    """x -> Add(w) -> Relu -> Sigmoid -> Softmax -> y, with a symbolic batch dim."""
    return validate(
        Graph(
            inputs=[Value("x", "float32", ("N", 4))],
            outputs=[Value("y", "float32", None)],
            nodes=[
                Node("Add", ["x", "w"], ["a"], name="add"),
                Node("Relu", ["a"], ["r"], name="relu"),
                Node("Sigmoid", ["r"], ["s"], name="sigmoid"),
                Node("Softmax", ["s"], ["y"], {"axis": -1}, name="softmax"),
            ],
            initializers={"w": np.array([0.5, -1.0, 2.0, 0.0], np.float32)},
        )
    )


def reference(x: np.ndarray) -> np.ndarray:
    s = 1 / (1 + np.exp(-np.maximum(x + np.array([0.5, -1.0, 2.0, 0.0], np.float32), 0)))
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def fake():
    backend = FakeBackend("fake", {"Add", "Relu", "Softmax"})
    register_backend(backend)
    yield backend
    unregister_backend("fake")


def test_run_matches_numpy(rng):
    sess = td.compile(small_graph(), backends=("numpy",))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    out = sess.run({"x": x})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], reference(x), rtol=1e-6)
    assert sess.placement.counts() == {"numpy": 4}
    assert sess.outputs[0].shape == ("N", 4)


def test_fallback_warns_once_naming_ops_and_placement_has_reasons(fake, rng):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = td.compile(small_graph(), backends=("fake", "numpy"))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "Sigmoid" in messages[0] and "fake" in messages[0]
    p = sess.placement
    assert p["add"] == "fake" and p["sigmoid"] == "numpy" and p["softmax"] == "fake"
    assert p.refusals["sigmoid"] == {"fake": "fake has no Sigmoid kernel"}
    assert [part.backend for part in p.partitions] == ["fake", "numpy", "fake"]
    assert p.partitions[1].inputs == ["r"] and p.partitions[1].outputs == ["s"]
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})["y"], reference(x), rtol=1e-6)
    assert fake.runs == 2


def test_strict_raises_naming_refused_node(fake):
    with pytest.raises(
        td.UnsupportedOpError, match=r"sigmoid \(Sigmoid\): fake: fake has no Sigmoid"
    ):
        td.compile(small_graph(), backends=("fake", "numpy"), strict=True)


def test_no_backend_can_run_a_node(fake):
    with pytest.raises(td.UnsupportedOpError, match="Sigmoid"):
        td.compile(small_graph(), backends=("fake",))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"precision": "int3"}, "precision must be one of"),
        ({"optimize": "most"}, "optimize level must be one of"),
        ({"optimize": ["fold", "nosuch"]}, "unknown pass"),
        ({"min_partition_size": 0}, "min_partition_size must be >= 1"),
        ({"memory_limit": -1}, "memory_limit must be a positive number"),
        ({"backend_options": {"webgpu": {}}}, "not among the backends"),
    ],
    ids=["precision", "optimize", "passes", "min-partition", "memory-limit", "backend-options"],
)
def test_bad_compile_arguments_are_typed_errors(options, message):
    """Every argument td.compile refuses is a TinyDLError (an InvalidInputError, still a
    ValueError), as the errors module promises for every error raised on purpose."""
    with pytest.raises(td.InvalidInputError, match=message):
        td.compile(small_graph(), backends=("numpy",), **options)


def test_unknown_backend_and_precision():
    with pytest.raises(td.BackendUnavailableError, match="unknown backend 'tpu'"):
        td.compile(small_graph(), backends=("tpu",))
    with pytest.raises(ValueError, match="precision"):
        td.compile(small_graph(), backends=("numpy",), precision="int3")


@pytest.mark.parametrize(
    "feeds, error, message",
    [
        (
            {"x": np.ones((2, 4), np.float64)},
            td.InvalidShapeError,
            "expected dtype float32, got float64",
        ),
        ({"x": np.ones((2, 5), np.float32)}, td.InvalidShapeError, r"dim 1 must be 4"),
        ({"x": np.ones((4,), np.float32)}, td.InvalidShapeError, "expected rank 2"),
        ({}, td.InvalidInputError, "missing input 'x'"),
        (
            {"x": np.ones((2, 4), np.float32), "z": 1},
            td.InvalidInputError,
            r"unknown input\(s\) \['z'\]",
        ),
    ],
)
def test_bad_feeds_name_input_expected_and_got(feeds, error, message):
    sess = td.compile(small_graph(), backends=("numpy",))
    with pytest.raises(error, match=message):
        sess.run(feeds)


def test_symbolic_dims_must_agree_across_inputs():
    g = validate(
        Graph(
            inputs=[Value("a", "float32", ("N", 3)), Value("b", "float32", ("N", 3))],
            outputs=[Value("c", "float32", None)],
            nodes=[Node("Add", ["a", "b"], ["c"], name="add")],
        )
    )
    sess = td.compile(g, backends=("numpy",))
    with pytest.raises(td.InvalidShapeError, match="'N' is 2 in input 'a'"):
        sess.run({"a": np.ones((2, 3), np.float32), "b": np.ones((5, 3), np.float32)})


def test_load_errors(tmp_path):
    with pytest.raises(td.InvalidModelError, match="no such file"):
        td.load(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00hello")
    with pytest.raises(td.InvalidModelError, match="unrecognized model file"):
        td.load(junk)


def test_import_is_light():
    code = (
        "import sys, tinydl; heavy = [m for m in ('numpy', 'onnx', 'torch', 'wgpu', 'cupy', "
        "'onnxruntime') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_partitions_are_public():
    """sess.partitions lists the compiled partitions in run order with their kernels."""
    import tinydl as td
    from tinydl.models import load_espcn

    sess = td.compile(load_espcn(3), backends=("numpy",))
    (part,) = sess.partitions
    assert part.backend == "numpy"
    assert [n.op for n in part.partition.nodes] == [n.op for n in sess.graph.nodes]
    assert set(part.partition.outputs) == {v.name for v in sess.graph.outputs}
    assert hasattr(part.kernel, "run")


def test_environment_options_are_read_into_backend_options():
    from tinydl.backends.base import environment_options

    env = {"TINYDL_CUDA_CHAIN": "off", "TINYDL_WEBGPU_WINOGRAD": "1", "HOME": "/"}
    assert environment_options("cuda", env) == {"chain_fusion": False}
    env["TINYDL_CUDA_GENERIC"] = "off"
    assert environment_options("cuda", env) == {"chain_fusion": False, "generic_kernels": "off"}
    assert environment_options("webgpu", env) == {"winograd": "1"}
    assert environment_options("cuda", {"TINYDL_CUDA_CHAIN": "16,32,256"}) == {
        "chain_tile": "16,32,256"
    }
    assert environment_options("numpy", env) == {}


def test_public_api_lists_backends_saves_and_moves_tensors(tmp_path):
    """td.list_backends() says which backends run here and why not; sess.save writes the
    optimized graph; outputs="name" returns that output; td.to_device/to_host move arrays."""
    import tinydl as td
    from tinydl.models import load_espcn

    infos = {b.name: b for b in td.list_backends()}
    assert {"numpy", "webgpu", "cuda"} <= set(infos)
    assert infos["numpy"].available and infos["numpy"].devices and infos["numpy"].memory == "host"
    for info in infos.values():
        assert info.available == (info.reason == ""), info
    graph = load_espcn(3)
    sess = td.compile(graph, backends=("numpy",))
    path = tmp_path / "optimized.tdl"
    sess.save(path)
    again = td.load(path)
    assert [n.op for n in again.nodes] == [n.op for n in sess.graph.nodes]
    assert "tinydl.FusedConv" in {n.op for n in again.nodes}
    x = np.random.default_rng(0).random((1, 1, 6, 7), dtype=np.float32)
    (name,) = [v.name for v in graph.outputs]
    want = sess.run({"y": x})[name]
    got = td.compile(again, backends=("numpy",), optimize="none").run({"y": x}, outputs=name)
    assert list(got) == [name]
    np.testing.assert_array_equal(got[name], want)
    assert td.to_host(td.to_device(x, "numpy")) is not None
    if infos["webgpu"].available:
        dev = td.to_device(x, "webgpu")
        np.testing.assert_array_equal(td.to_host(dev), x)


def test_gemm_bias_broadcasts_one_way_only():
    """A (5, 1) bias fits an (N, 5) Gemm output only at N = 5: at N = 1 it would widen the
    result to (5, 5), so the run fails with a typed error naming the node."""
    graph = validate(
        Graph(
            inputs=[Value("a", "float32", ("N", 3))],
            outputs=[Value("y", "float32", None)],
            nodes=[Node("Gemm", ["a", "b", "c"], ["y"], name="fc")],
            initializers={
                "b": np.ones((3, 5), np.float32),
                "c": np.arange(5, dtype=np.float32).reshape(5, 1),
            },
        )
    )
    sess = td.compile(graph, backends=("numpy",))
    assert sess.run({"a": np.ones((5, 3), np.float32)})["y"].shape == (5, 5)
    with pytest.raises(td.OpError, match=r"'fc' \(Gemm\).*does not broadcast to \(1, 5\)"):
        sess.run({"a": np.ones((1, 3), np.float32)})


class Stacking(FakeGPU):
    """A device backend that records the batches it is asked to make."""

    def __init__(self, name, ops):
        super().__init__(name, ops)
        self.stacked: list[list[np.ndarray]] = []

    def stack_to_device(self, arrays):
        self.stacked.append(list(arrays))
        return super().stack_to_device(arrays)


def test_stack_input_makes_the_batch_where_the_model_runs(rng):
    parts = [rng.standard_normal((n, 4)).astype(np.float32) for n in (1, 2)]
    sess = td.compile(small_graph(), backends=("numpy",))
    x = sess.stack_input("x", parts)
    np.testing.assert_array_equal(x, np.concatenate(parts))
    assert sess.stack_input("x", parts[:1]) is parts[0]
    with pytest.raises(td.InvalidInputError, match=r"array 1 is float32\[1, 5\]"):
        sess.stack_input("x", [parts[0], rng.random((1, 5), dtype=np.float32)])
    with pytest.raises(td.InvalidInputError, match="array 1 is 0-d"):
        sess.stack_input("x", [parts[0], np.float32(1.0)])
    with pytest.raises(td.InvalidInputError, match="unknown input 'z'"):
        sess.stack_input("z", parts)
    # Where a device backend reads the input first, that backend makes the batch.
    backend = Stacking("stk", {"Add", "Relu", "Sigmoid", "Softmax"})
    register_backend(backend)
    try:
        sess = td.compile(small_graph(), backends=("stk",), strict=True)
        x = sess.stack_input("x", parts)
        assert [len(b) for b in backend.stacked] == [2]
        np.testing.assert_allclose(sess.run({"x": x})["y"], reference(np.concatenate(parts)))
    finally:
        unregister_backend("stk")
