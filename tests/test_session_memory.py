"""Memories and owners: each backend says which memory its tensors live in (`Backend.memory`);
the plan moves values only between memories, the session adopts each feed once per run as
(memory, tensor), and each output's owner (`Session.output_backends`) comes from the plan."""

import warnings

import numpy as np
import pytest

import tinydl as td
from tinydl.backends import Backend, Support, get_backend, register_backend, unregister_backend
from tinydl.backends.base import HOST
from tinydl.backends.cpu import CPUBackend, CPUKernel
from tinydl.backends.partition import Transfer
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate
from tinydl.pipeline import ComponentRunner, DeviceTensor, Tensor
from tinydl.pipeline.components import Inference, ToHost


class DevTensor:
    """A fake device tensor: an array the host may only reach through the backend."""

    def __init__(self, array: np.ndarray, memory: str):
        self.array, self.memory = array, memory
        self.shape, self.dtype = array.shape, array.dtype


class DeviceBackend(Backend):
    """A backend with a device memory of its own (`memory`, default its name): it claims a chosen
    op set, runs it with the NumPy references on DevTensors of that memory, and counts how often
    the session asks about, uploads and downloads tensors."""

    def __init__(self, name: str, ops: set[str], memory: str | None = None):
        self.name, self.ops, self.memory = name, ops, memory or name
        self.asked = self.uploads = self.downloads = self.runs = 0

    def available(self) -> bool:
        return True

    def supports(self, node, graph) -> Support:
        return Support(node.op in self.ops, f"{self.name} has no {node.op} kernel")

    def compile(self, subgraph, options):
        kernel, fake = CPUKernel(subgraph), self

        class Kernel:
            def run(self, inputs):
                fake.runs += 1
                for name, t in inputs.items():
                    assert isinstance(t, DevTensor) and t.memory == fake.memory, name
                out = kernel.run({n: t.array for n, t in inputs.items()})
                return {n: DevTensor(a, fake.memory) for n, a in out.items()}

        return Kernel()

    def to_device(self, array):
        assert isinstance(array, np.ndarray)
        self.uploads += 1
        return DevTensor(np.array(array), self.memory)

    def to_host(self, tensor):
        assert isinstance(tensor, DevTensor) and tensor.memory == self.memory
        self.downloads += 1
        return tensor.array.copy()

    def is_device_tensor(self, tensor) -> bool:
        self.asked += 1
        return isinstance(tensor, DevTensor) and tensor.memory == self.memory


class HostBackend(DeviceBackend):
    """Claims a chosen op set and computes in host memory, as the cpu backend does."""

    def __init__(self, name: str, ops: set[str]):
        super().__init__(name, ops)
        self.memory = HOST

    def compile(self, subgraph, options):
        return CPUKernel(subgraph)


@pytest.fixture
def backends():
    made = []

    def make(backend):
        register_backend(backend)
        made.append(backend.name)
        return backend

    yield make
    for name in made:
        unregister_backend(name)


def chain(*ops: str, shape=(2, 3), outputs=("y",)) -> Graph:
    """x -> op0 -> op1 -> ... -> y (v0, v1, ... between)."""
    nodes, prev = [], "x"
    for k, op in enumerate(ops):
        out = "y" if k == len(ops) - 1 else f"v{k}"
        nodes.append(Node(op, [prev], [out], name=f"{op.lower()}{k}"))
        prev = out
    return validate(
        Graph([Value("x", "float32", shape)], [Value(o, "float32", None) for o in outputs], nodes)
    )


def compiled(graph, backends):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallbacks are the point here
        return td.compile(graph, backends=backends)


def moves(sess) -> list[tuple[str, str, str]]:
    return [(t["value"], t["src"], t["dst"]) for t in sess.profile()["transfers"]]


def test_each_backend_declares_its_memory():
    from tinydl.backends.cuda import CUDABackend
    from tinydl.backends.webgpu import WebGPUBackend

    assert HOST == "host" and Backend.memory == HOST
    assert CPUBackend.memory == HOST
    # A GPU backend's memory is its device's: one named by index is a memory of its own.
    assert WebGPUBackend().memory == "webgpu" and CUDABackend().memory == "cuda"
    assert WebGPUBackend(1).memory == "webgpu:1" and CUDABackend(2).memory == "cuda:2"


def test_backends_sharing_host_memory_need_no_transfer(backends, rng):
    fake = backends(HostBackend("hostfake", {"Relu", "Tanh"}))
    g = chain("Relu", "Sigmoid", "Tanh")
    sess = compiled(g, ("hostfake", "numpy"))
    assert [p.backend for p in sess.placement.partitions] == ["hostfake", "numpy", "hostfake"]
    assert sess.placement.memory == {"hostfake": HOST, "numpy": HOST}
    assert sess.placement.transfers == [] and sess.placement.bytes_per_run() == 0
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})["y"], compiled(g, ("numpy",)).run({"x": x})["y"])
    assert sess.profile()["transfers"] == [] and fake.asked == 0


def test_backends_sharing_a_device_memory_need_no_transfer(backends, rng):
    a = backends(DeviceBackend("a", {"Relu"}, memory="dev"))
    b = backends(DeviceBackend("b", {"Tanh"}, memory="dev"))
    g = chain("Relu", "Tanh", "Sigmoid")
    sess = compiled(g, ("a", "b", "numpy"))
    size = 2 * 3 * 4
    assert [p.backend for p in sess.placement.partitions] == ["a", "b", "numpy"]
    assert sess.placement.transfers == [
        Transfer("x", HOST, "dev", size),
        Transfer("v1", "dev", HOST, size),
    ]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})["y"], compiled(g, ("numpy",)).run({"x": x})["y"])
    assert moves(sess) == [("x", HOST, "dev"), ("v1", "dev", HOST)]
    # v0 went from a's kernel to b's as it was (b's kernel asserts it is a "dev" tensor).
    assert (a.runs, b.runs) == (1, 1) and a.uploads + b.uploads == 1


def test_each_feed_is_asked_about_once_per_run(backends, rng):
    dev = backends(DeviceBackend("dev", {"Relu", "Tanh"}))
    g = chain("Relu", "Sigmoid", "Tanh")
    sess = compiled(g, ("dev", "numpy"))
    assert [p.backend for p in sess.placement.partitions] == ["dev", "numpy", "dev"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    want = compiled(g, ("numpy",)).run({"x": x})["y"]
    fed = DevTensor(x, "dev")
    for outputs in ("host", "device", ["y"], "host"):
        dev.asked = dev.uploads = dev.downloads = 0
        out = sess.run({"x": fed}, outputs=outputs)["y"]
        assert dev.asked == 1, outputs  # once for the one feed, in one place
        # The feed is in the memory its partition reads it from: not moved. v0 comes down to
        # the cpu and v1 goes up; y comes down only when asked for on the host.
        assert dev.uploads == 1
        assert dev.downloads == (1 if outputs == "device" else 2)
        got = out.array if outputs == "device" else out
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert moves(sess) == [("v0", "dev", HOST), ("v1", HOST, "dev"), ("y", "dev", HOST)]
    # A NumPy array is host memory: no backend is asked.
    dev.asked = 0
    sess.run({"x": x})
    assert dev.asked == 0
    assert moves(sess)[0] == ("x", HOST, "dev")


def test_a_device_feed_for_another_memory_moves_at_the_boundary(backends, rng):
    dev = backends(DeviceBackend("dev", {"Relu"}))
    g = chain("Sigmoid", "Tanh")  # all cpu
    sess = compiled(g, ("dev", "numpy"))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = sess.run({"x": DevTensor(x, "dev")})["y"]
    np.testing.assert_allclose(y, compiled(g, ("numpy",)).run({"x": x})["y"], rtol=1e-6)
    assert moves(sess) == [("x", "dev", HOST)] and dev.downloads == 1


def test_one_partition_with_device_feed_and_outputs_moves_nothing(backends, rng):
    dev = backends(DeviceBackend("dev", {"Relu", "Tanh"}))
    sess = compiled(chain("Relu", "Tanh"), ("dev", "numpy"))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    fed = DevTensor(x, "dev")
    for _ in range(3):
        out = sess.run({"x": fed}, outputs="device")["y"]
        assert isinstance(out, DevTensor)
        assert (dev.uploads, dev.downloads) == (0, 0)
        assert sess.profile()["transfers"] == []
    np.testing.assert_allclose(out.array, np.tanh(np.maximum(x, 0)), rtol=1e-6)
    assert dev.runs == 3 and dev.asked == 3
    np.testing.assert_allclose(sess.run({"x": fed})["y"], out.array)
    assert moves(sess) == [("y", "dev", HOST)]


def test_output_backends_name_the_producer(backends, rng):
    backends(DeviceBackend("dev", {"Relu", "Tanh"}))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    # The device makes y, with the cpu in the middle.
    made_on_dev = compiled(chain("Relu", "Sigmoid", "Tanh"), ("dev", "numpy"))
    assert made_on_dev.output_backends == {"y": "dev"}
    assert isinstance(made_on_dev.run({"x": x}, outputs="device")["y"], DevTensor)
    # Only the cpu runs the last node.
    made_on_cpu = compiled(chain("Relu", "Sigmoid"), ("dev", "numpy"))
    assert made_on_cpu.output_backends == {"y": "numpy"}
    assert isinstance(made_on_cpu.run({"x": x}, outputs="device")["y"], np.ndarray)
    # Two outputs, one of each; v0 is also read by the cpu, and still comes back as dev's.
    both = compiled(chain("Relu", "Sigmoid", outputs=("v0", "y")), ("dev", "numpy"))
    assert both.output_backends == {"v0": "dev", "y": "numpy"}
    out = both.run({"x": x}, outputs="device")
    assert isinstance(out["v0"], DevTensor) and isinstance(out["y"], np.ndarray)
    np.testing.assert_allclose(out["v0"].array, np.maximum(x, 0))
    # A copy, so callers cannot change the session's.
    both.output_backends["y"] = "dev"
    assert both.output_backends["y"] == "numpy"


def test_an_input_passed_through_has_no_producer(backends, rng):
    backends(DeviceBackend("dev", {"Relu"}))
    g = validate(
        Graph(
            [Value("x", "float32", (2, 3))],
            [Value("y", "float32", None), Value("x", "float32", (2, 3))],
            [Node("Relu", ["x"], ["y"], name="relu")],
        )
    )
    sess = compiled(g, ("dev", "numpy"))
    assert sess.output_backends == {"y": "dev", "x": None}
    x = rng.standard_normal((2, 3)).astype(np.float32)
    fed = DevTensor(x, "dev")
    out = sess.run({"x": fed}, outputs="device")
    assert out["x"] is fed and isinstance(out["y"], DevTensor)
    host = sess.run({"x": fed})
    np.testing.assert_array_equal(host["x"], x)
    np.testing.assert_allclose(host["y"], np.maximum(x, 0))


def test_unknown_output_names_fail_before_running(backends, rng):
    dev = backends(DeviceBackend("dev", {"Relu"}))
    sess = compiled(chain("Relu", "Sigmoid"), ("dev", "numpy"))
    with pytest.raises(td.InvalidInputError, match=r"unknown output\(s\) \['nope'\]"):
        sess.run({"x": np.zeros((2, 3), np.float32)}, outputs=["y", "nope"])
    assert dev.runs == 0
    # A value between partitions may be asked for by name, on the host.
    out = sess.run({"x": np.ones((2, 3), np.float32)}, outputs=["v0"])
    np.testing.assert_array_equal(out["v0"], np.ones((2, 3), np.float32))


def one(component, payloads):
    return [p.payload for p in ComponentRunner(component).run({"in": payloads})["out"]]


def test_inference_labels_device_outputs_with_their_producer(backends, rng):
    backends(DeviceBackend("dev", {"Relu", "Tanh"}))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for graph, owner in (
        (chain("Relu", "Sigmoid", "Tanh"), "dev"),
        (chain("Tanh", "Sigmoid"), "numpy"),
    ):
        want = compiled(graph, ("numpy",)).run({"x": x})["y"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (dev,) = one(
                Inference(model=graph, backends="dev,numpy", output_as="device"), [Tensor(x)]
            )
        # backends[-1] would say "numpy" for both
        assert isinstance(dev, DeviceTensor) and dev.backend == owner
        np.testing.assert_allclose(one(ToHost(), [dev])[0].data, want, rtol=1e-6)


def gpu(name: str):
    backend = get_backend(name)
    return pytest.param(
        name,
        marks=pytest.mark.skipif(not backend.available(), reason=backend.unavailable_reason()),
    )


GPUS = [gpu("webgpu"), gpu("cuda")]


def mixed(outputs=("y",)) -> Graph:
    """Relu on the GPU; Cast to float64, Sqrt and Cast back only the cpu runs (neither GPU
    backend holds float64); Sigmoid on the GPU again."""
    return validate(
        Graph(
            [Value("x", "float32", (2, 8))],
            [Value(o, "float32", None) for o in outputs],
            [
                Node("Relu", ["x"], ["a"], name="relu"),
                Node("Cast", ["a"], ["d"], {"to": 11}, name="up"),
                Node("Sqrt", ["d"], ["e"], name="sqrt"),
                Node("Cast", ["e"], ["f"], {"to": 1}, name="down"),
                Node("Sigmoid", ["f"], ["y"], name="sigmoid"),
            ],
        )
    )


def cpu_last() -> Graph:
    """Relu on the GPU, then a Cast to float64 that only the cpu runs."""
    return validate(
        Graph(
            [Value("x", "float32", (2, 8))],
            [Value("y", "float64", None)],
            [
                Node("Relu", ["x"], ["a"], name="relu"),
                Node("Cast", ["a"], ["y"], {"to": 11}, name="up"),
            ],
        )
    )


@pytest.mark.parametrize("name", GPUS)
def test_gpu_and_cpu_outputs_and_owners(name, rng):
    backend = get_backend(name)
    x = rng.random((2, 8), dtype=np.float32)
    sess = compiled(mixed(("a", "y")), (name, "numpy"))
    assert [p.backend for p in sess.partitions] == [name, "numpy", name]
    assert sess.output_backends == {"a": name, "y": name}
    want = compiled(mixed(("a", "y")), ("numpy",)).run({"x": x})
    out = sess.run({"x": x}, outputs="device")
    # a is also read by the cpu (read back with the compute), yet comes back as the GPU's.
    assert backend.is_device_tensor(out["a"]) and backend.is_device_tensor(out["y"])
    for key in want:
        np.testing.assert_allclose(backend.to_host(out[key]), want[key], rtol=1e-5, atol=1e-6)
    host = sess.run({"x": sess.run({"x": x}, outputs="device")["a"]})  # a device feed
    for key in want:
        np.testing.assert_allclose(host[key], want[key], rtol=1e-5, atol=1e-6)
    assert ("x", HOST, name) not in moves(sess)

    last = compiled(cpu_last(), (name, "numpy"))
    assert last.output_backends == {"y": "numpy"}
    y = last.run({"x": x}, outputs="device")["y"]
    assert isinstance(y, np.ndarray) and y.dtype == np.float64
    np.testing.assert_allclose(y, np.maximum(x, 0))


@pytest.mark.parametrize("name", GPUS)
def test_inference_on_gpu_and_cpu_labels_each_output(name, rng):
    x = rng.random((2, 8), dtype=np.float32)
    for graph, owner in ((mixed(), name), (cpu_last(), "numpy")):
        want = compiled(graph, ("numpy",)).run({"x": x})["y"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inference = Inference(model=graph, backends=(name, "numpy"), output_as="device")
            (dev,) = one(inference, [Tensor(x)])
        assert dev.backend == owner
        np.testing.assert_allclose(one(ToHost(), [dev])[0].data, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "webgpu"])
def test_big_endian_feeds_give_the_same_results(backend):
    """A big-endian float32 feed (`>f4`) holds the same numbers as a native one; every backend
    gives the same result for it (webgpu used to upload its raw bytes: off by up to 3e38)."""
    from tinydl.backends import get_backend
    from tinydl.models import load_espcn

    if not get_backend(backend).available():
        pytest.skip(get_backend(backend).unavailable_reason())
    graph = load_espcn(3)
    name = graph.inputs[0].name
    x = np.random.default_rng(3).random((1, 1, 10, 12), dtype=np.float32)
    sess = td.compile(graph, backends=(backend,), strict=True)
    (want,) = sess.run({name: x}).values()
    (got,) = sess.run({name: x.astype(">f4")}).values()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["numpy", "webgpu"])
def test_inputs_that_fit_symbolic_dims_but_not_the_graph(backend):
    """ESPCN takes (N, 1, H, W): a zero batch gives an empty output; a zero height fits the
    symbols but not the 5x5 convolution, an OpError on every backend (not a raw ValueError)."""
    from tinydl.models import load_espcn

    if not get_backend(backend).available():
        pytest.skip(get_backend(backend).unavailable_reason())
    graph = load_espcn(3)
    name = graph.inputs[0].name
    sess = td.compile(graph, backends=(backend,), strict=True)
    (out,) = sess.run({name: np.zeros((0, 1, 8, 8), np.float32)}).values()
    assert out.shape == (0, 1, 24, 24)
    with pytest.raises(td.OpError, match="conv1"):
        sess.run({name: np.ones((1, 1, 0, 8), np.float32)})


def _pad_model(pad: int, shape) -> Graph:
    return validate(
        Graph(
            [Value("x", "float32", shape)],
            [Value("y", "float32", None)],
            [Node("Pad", ["x", "pads"], ["y"], name="pad")],
            initializers={"pads": np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64)},
        )
    )


def test_absurd_allocations_are_refused_before_anything_runs(monkeypatch):
    """A tiny file can ask for tens of GiB (a Pad of 40,000; a Resize x30,000; a
    ConvTranspose of stride 50,000): refused with BufferSizeError naming the value and node,
    at compile when shapes are static, at run when they are symbolic; the limit is
    configurable."""
    with pytest.raises(td.BufferSizeError, match=r"node 'pad' \(Pad\).*memory limit"):
        td.compile(_pad_model(40000, (1, 3, 8, 8)), backends=("numpy",), memory_limit=1 << 30)
    sess = td.compile(_pad_model(40000, ("N", 3, "H", "W")), backends=("numpy",))
    sess.memory_limit = 1 << 30
    with pytest.raises(td.BufferSizeError, match="'y'"):
        sess.run({"x": np.ones((1, 3, 8, 8), np.float32)})
    small = td.compile(_pad_model(2, ("N", 3, "H", "W")), backends=("numpy",), memory_limit=1 << 30)
    assert small.run({"x": np.ones((1, 3, 8, 8), np.float32)})["y"].shape == (1, 3, 12, 12)
    resize = validate(
        Graph(
            [Value("x", "float32", ("N", 3, "H", "W"))],
            [Value("y", "float32", None)],
            [Node("Resize", ["x", "", "scales"], ["y"], name="resize")],
            initializers={"scales": np.array([1, 1, 30000, 30000], np.float32)},
        )
    )
    monkeypatch.setenv("TINYDL_MEMORY_LIMIT", "2G")
    sess = td.compile(resize, backends=("numpy",))
    assert sess.memory_limit == 2 << 30
    with pytest.raises(td.BufferSizeError, match=r"node 'resize' \(Resize\)"):
        sess.run({"x": np.ones((1, 3, 4, 4), np.float32)})
    convt = validate(
        Graph(
            [Value("x", "float32", (1, 1, 4, 4))],
            [Value("y", "float32", None)],
            [Node("ConvTranspose", ["x", "w"], ["y"], {"strides": [50000, 50000]}, name="up")],
            initializers={"w": np.ones((1, 1, 2, 2), np.float32)},
        )
    )
    with pytest.raises(td.BufferSizeError, match="up"):
        td.compile(convt, backends=("numpy",))
