"""Every kernel the cuda backend emits for the op cases of test_ops.py compiles with NVRTC.

Needs CuPy and NVRTC but no GPU: plans are made against a stand-in context (cuda_fake.py) that
compiles each generated kernel for sm_90 and launches nothing. Whether the kernels compute the
right thing is test_cuda_ops.py's job, on a GPU.
"""

from __future__ import annotations

import pytest
from opcheck import backend_case, wrap_fp16
from test_ops import CASES

from tinydl.backends.base import CompileOptions

pytest.importorskip("cupy", reason="CuPy is not installed (pip install 'tinydl[cuda]')")
pytest.importorskip("jinja2")
try:
    from cupy_backends.cuda.libs import nvrtc

    nvrtc.getVersion()
except Exception as exc:  # noqa: BLE001 - any failure to load NVRTC means: cannot check here
    pytest.skip(f"NVRTC is not loadable: {exc}", allow_module_level=True)

from cuda_fake import FakeContext  # noqa: E402

from tinydl.backends.cuda import CUDABackend  # noqa: E402
from tinydl.backends.cuda.program import CUDAKernel  # noqa: E402

BACKEND = CUDABackend()
CTX = FakeContext()


@pytest.mark.parametrize(("op", "inputs", "attrs", "consts", "rtol", "atol"), CASES)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_op_compiles(op, inputs, attrs, consts, rtol, atol, precision, request):
    _, graph, _ = backend_case(BACKEND, op, inputs, attrs, consts, request)
    if precision == "fp16":
        graph = wrap_fp16(graph)
    kernel = CUDAKernel(CTX, graph, CompileOptions(precision=precision))
    assert kernel.plans, "a graph with static input shapes is planned when compiled"
