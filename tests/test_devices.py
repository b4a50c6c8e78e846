"""Choosing the device (`tinydl.compile(device=...)`) and the CPU threads (`threads=`): with a
fake multi-device GPU backend, and for real on webgpu (lavapipe's adapter 0 in CI)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.fakes import FakeGPU
from helpers.gpu import gpu_backend
from helpers.models import small_graph, small_reference

import tinydl as td
from tinydl.backends import register_backend, unregister_backend
from tinydl.backends.base import MAX_DEFAULT_THREADS, default_threads
from tinydl.errors import BackendUnavailableError

OPS = {"Mul", "Relu", "Reshape", "Sigmoid"}


@pytest.fixture
def fakegpu():
    backend = FakeGPU("fakegpu", OPS, count=2)
    register_backend(backend)
    yield backend
    unregister_backend("fakegpu")


@pytest.fixture
def x(rng):
    return rng.standard_normal((2, 8)).astype(np.float32)


@pytest.mark.parametrize("device", ["fakegpu:1", 1])
def test_device_picks_the_gpu(fakegpu, x, device):
    sess = td.compile(small_graph(), backends=("fakegpu", "cpu"), device=device)
    assert fakegpu.compiled_on == [1]
    assert sess.placement.memory["fakegpu"] == "fakegpu:1"
    assert set(sess.placement.nodes.values()) == {"fakegpu"}
    np.testing.assert_allclose(sess.run({"x": x})["y"], small_reference(x), rtol=1e-6)


def test_device_without_backends_puts_its_backend_first(fakegpu, x):
    sess = td.compile(small_graph(), device="fakegpu:0")
    assert sess.requested == ["fakegpu", "cpu"]
    assert fakegpu.compiled_on == [0]
    np.testing.assert_allclose(sess.run({"x": x})["y"], small_reference(x), rtol=1e-6)


def test_no_device_keeps_the_backends_default(fakegpu):
    sess = td.compile(small_graph(), backends=("fakegpu", "cpu"))
    assert fakegpu.compiled_on == [None]
    assert sess.placement.memory["fakegpu"] == "fakegpu"


@pytest.mark.parametrize("device", ["fakegpu:2", 7])
def test_a_device_that_does_not_exist_lists_those_there_are(fakegpu, device):
    with pytest.raises(BackendUnavailableError) as err:
        td.compile(small_graph(), backends=("fakegpu", "cpu"), device=device)
    message = str(err.value)
    assert "does not exist" in message
    assert "fakegpu:0 (fakegpu device 0)" in message and "fakegpu:1 (fakegpu device 1)" in message
    assert "numpy:0" in message
    assert fakegpu.compiled_on == []


def test_device_errors_name_the_problem(fakegpu):
    with pytest.raises(BackendUnavailableError, match="unknown backend 'tpu'"):
        td.compile(small_graph(), device="tpu:0")
    with pytest.raises(ValueError, match="leaves out"):
        td.compile(small_graph(), backends=("cpu",), device="fakegpu:0")
    with pytest.raises(BackendUnavailableError, match="has none"):
        td.compile(small_graph(), backends=("cpu",), device=0)
    with pytest.raises(ValueError, match="NAME:INDEX"):
        td.compile(small_graph(), device="fakegpu:x")
    with pytest.raises(ValueError, match=">= 0"):
        td.compile(small_graph(), backends=("fakegpu", "cpu"), device=-1)


def test_list_backends_lists_every_device(fakegpu):
    info = {b.name: b for b in td.list_backends()}
    assert info["fakegpu"].device_names == ("fakegpu device 0", "fakegpu device 1")
    assert len(info["numpy"].device_names) == 1


def test_webgpu_device_zero_runs(x):
    backend = gpu_backend("webgpu")
    sess = td.compile(small_graph(), backends=("webgpu", "cpu"), device="webgpu:0")
    assert sess.placement.memory["webgpu"] == "webgpu:0"
    assert set(sess.placement.nodes.values()) == {"webgpu"}
    np.testing.assert_allclose(sess.run({"x": x})["y"], small_reference(x), rtol=1e-5)
    # a tensor of adapter 0's device is this session's own; one of the default device is read
    # back and uploaded again, with the same result
    mine = td.to_device(x, "webgpu:0")
    assert backend.on_device(0).is_device_tensor(mine)
    assert not backend.is_device_tensor(mine)
    for feed in (mine, td.to_device(x, "webgpu")):
        out = sess.run({"x": feed}, outputs="device")["y"]
        np.testing.assert_allclose(td.to_host(out), small_reference(x), rtol=1e-5)
    names = backend.device_names()
    with pytest.raises(BackendUnavailableError, match=rf"webgpu:{len(names)}' does not exist"):
        td.compile(small_graph(), backends=("webgpu",), device=f"webgpu:{len(names)}")


def test_default_threads_is_the_physical_cores_capped():
    n = default_threads()
    assert 1 <= n <= MAX_DEFAULT_THREADS


def _numpy_blas_threads() -> list[int]:
    """Threads of NumPy's own BLAS (other libraries, e.g. PyTorch's, may be loaded too: the
    limit is on the BLAS tinydl's numpy backend calls)."""
    from threadpoolctl import threadpool_info

    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    own = [i for i in blas if "numpy" in i["filepath"]] or blas
    return [i["num_threads"] for i in own]


def _blas_threads_seen(sess, x) -> int:
    """The BLAS threads in force while the session runs (read from inside a run)."""
    seen = []
    kernel = sess.partitions[0].kernel
    step = kernel.steps[0][1]
    original = step.run

    def spy(node, args):
        seen.append(max(_numpy_blas_threads()))
        return original(node, args)

    step.run = spy
    try:
        sess.run({"x": x})
    finally:
        step.run = original
    return seen[0]


def test_threads_limit_blas_during_a_run_only(x):
    before = _numpy_blas_threads()
    if not before:
        pytest.skip("NumPy's BLAS is not one threadpoolctl can control")
    sess = td.compile(small_graph(), backends=("numpy",), threads=1)
    assert _blas_threads_seen(sess, x) == 1
    assert _numpy_blas_threads() == before


def test_threads_drive_numpy_and_onnxruntime(x):
    pytest.importorskip("onnxruntime")
    sess = td.compile(small_graph(), backends=("onnxruntime", "numpy"), threads=1)
    kernel = sess.partitions[0].kernel
    assert sess.partitions[0].backend == "onnxruntime"
    assert kernel.session.get_session_options().intra_op_num_threads == 1
    np.testing.assert_allclose(sess.run({"x": x})["y"], small_reference(x), rtol=1e-6)
    numpy_sess = td.compile(small_graph(), backends=("numpy",), threads=1)
    assert numpy_sess.partitions[0].kernel.threads == 1
    own = td.compile(
        small_graph(),
        backends=("numpy",),
        threads=1,
        backend_options={"numpy": {"threads": 2}},
    )
    assert own.partitions[0].kernel.threads == 2
    assert td.compile(small_graph(), backends=("numpy",)).partitions[0].kernel.threads == (
        default_threads()
    )


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_bad_threads_are_refused(threads):
    with pytest.raises(ValueError, match="threads"):
        td.compile(small_graph(), backends=("numpy",), threads=threads)
