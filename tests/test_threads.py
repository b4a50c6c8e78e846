"""A Session is safe to share across threads: 8 threads x 100 runs each, on the cpu and webgpu
backends, with host and device outputs; every run's result is checked against the reference for
that thread's own input."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tinydl as td
from tinydl.backends import get_backend
from tinydl.models import load_espcn

THREADS, RUNS = 8, 100


@pytest.mark.parametrize("outputs", ["host", "device"])
@pytest.mark.parametrize("backend", ["numpy", "webgpu"])
def test_one_session_shared_by_threads(backend, outputs):
    if not get_backend(backend).available():
        pytest.skip(get_backend(backend).unavailable_reason())
    graph = load_espcn(3)
    name = graph.inputs[0].name
    sess = td.compile(graph, backends=(backend,), strict=True)
    ref = td.compile(graph, backends=("numpy",))
    rng = np.random.default_rng(7)
    inputs = [rng.random((1, 1, 12, 16), dtype=np.float32) for _ in range(THREADS)]
    want = [next(iter(ref.run({name: x}).values())) for x in inputs]
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def work(k: int) -> None:
        try:
            start.wait()
            for i in range(RUNS):
                (out,) = sess.run({name: inputs[k]}, outputs=outputs).values()
                got = out if isinstance(out, np.ndarray) else get_backend(backend).to_host(out)
                err = float(np.abs(got - want[k]).max())
                if err > 1e-5:
                    errors.append(f"thread {k} run {i}: error {err:.2e}")
                    return
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(f"thread {k}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
