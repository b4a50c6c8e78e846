"""The GPU backends under test, for test modules parametrized over them (test_gpu.py,
test_gpu_ops.py): each test skips with the backend's own unavailable reason where it cannot run
(webgpu runs in CI on Mesa's lavapipe; cuda needs an NVIDIA GPU and CuPy)."""

from __future__ import annotations

import pytest

from tinydl.backends import Backend, get_backend

GPU_BACKENDS = ("webgpu", "cuda")


def gpu_backend(name: str) -> Backend:
    """The registered backend `name`; skips the test, with the backend's reason, if unavailable."""
    backend = get_backend(name)
    if not backend.available():
        pytest.skip(f"{name}: {backend.unavailable_reason()}")
    return backend


def require_f16(name: str) -> None:
    """Skip unless backend `name` computes in fp16 here (a WebGPU adapter may lack shader-f16)."""
    if name == "webgpu":
        from tinydl.backends.webgpu.context import get_context

        if not get_context().has_f16:
            pytest.skip("the adapter lacks shader-f16")
