"""Every op case of test_ops.py on the webgpu backend vs the op's NumPy reference, fp32 and fp16.

Each case runs on fresh random inputs (seeded by the case id). fp32 uses the case's tolerances
(1e-5 relative in most cases). fp16 wraps the op between Identity copies, so that the op reads
and writes fp16 intermediates (a one-node graph has only fp32 inputs and outputs), and compares
at 1e-2. A case whose node the backend refuses is skipped with the backend's own reason, so the
skips list exactly what falls back to the cpu backend.

Runs on Mesa's lavapipe in CI; skipped only when wgpu or an adapter is missing.
"""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import backend_case, compare, run_reference, wrap_fp16
from test_ops import CASES

from tinydl.backends.base import CompileOptions
from tinydl.ir.graph import Graph

webgpu = pytest.importorskip("tinydl.backends.webgpu")
BACKEND = webgpu.WebGPUBackend()
if not BACKEND.available():
    pytest.skip(BACKEND.unavailable_reason(), allow_module_level=True)

F16 = {"rtol": 1e-2, "atol": 1e-2}


def _run(graph: Graph, feeds, precision: str) -> list[np.ndarray]:
    kernel = BACKEND.compile(graph, CompileOptions(precision=precision))
    tensors = {k: BACKEND.to_device(v) for k, v in feeds.items()}
    names = [v.name for v in graph.outputs]
    out = kernel.run_host(tensors, set(names))
    return [out[n] for n in names]


@pytest.mark.parametrize(("op", "inputs", "attrs", "consts", "rtol", "atol"), CASES)
def test_op_fp32(op, inputs, attrs, consts, rtol, atol, request):
    model, graph, feeds = backend_case(BACKEND, op, inputs, attrs, consts, request)
    want = run_reference(model, feeds)
    for i, (g, w) in enumerate(zip(_run(graph, feeds, "fp32"), want, strict=True)):
        compare(g, w, rtol, atol, f"output {i}", against="the reference")


@pytest.mark.parametrize(("op", "inputs", "attrs", "consts", "rtol", "atol"), CASES)
def test_op_fp16(op, inputs, attrs, consts, rtol, atol, request):
    if not BACKEND._context().has_f16:
        pytest.skip("the adapter lacks shader-f16")
    model, graph, feeds = backend_case(BACKEND, op, inputs, attrs, consts, request)
    want = run_reference(model, feeds)
    got = _run(wrap_fp16(graph), feeds, "fp16")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        # A float input rounded to fp16 may cross an integer, so a cast to int may move by 1.
        int_atol = 1 if not np.issubdtype(w.dtype, np.floating) else 0
        compare(
            g,
            w,
            max(rtol, F16["rtol"]),
            max(atol, F16["atol"], int_atol),
            f"output {i} (fp16)",
            against="the reference",
        )
