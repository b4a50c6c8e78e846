"""A stand-in CUDA context for machines without a GPU: kernels are generated and compiled by
NVRTC for a real architecture (sm_90), but nothing is launched. Device arrays are NumPy arrays.
Used by test_cuda_codegen.py to check every kernel the backend emits compiles, and by
.ci/smoke_installed.py (so it imports nothing but NumPy and tinydl)."""

from __future__ import annotations

import contextlib
import types

import numpy as np


class _FakeCupy(types.SimpleNamespace):
    pass


def fake_cupy():
    def ndarray(shape, dtype, memptr=None):
        return np.empty(shape, dtype)

    return _FakeCupy(
        empty=lambda shape, dtype=np.float32: np.empty(shape, dtype),
        ndarray=ndarray,
        asarray=np.asarray,
        uint8=np.uint8,
    )


class FakeFunction:
    def __init__(self, name, source):
        self.name, self.source = name, source
        self.max_dynamic_shared_size_bytes = 0


class FakeContext:
    """Compiles with NVRTC like the real context; records what would be launched."""

    def __init__(self, arch: str = "sm_90"):
        from tinydl.backends.cuda.context import compile_cubin

        self._compile = compile_cubin
        self.arch = arch
        self.cp = fake_cupy()
        self.device = contextlib.nullcontext()
        self.stats = {"compile_s": 0.0, "load_s": 0.0, "compiled": 0, "cache_hits": 0}
        self.smem_optin = 227 << 10
        self.sm_count = 132
        self.cc = (9, 0)
        self.name = "stand-in"
        self.nvrtc_version = (0, 0)
        self._seen: dict[str, bytes] = {}
        self._later: dict[str, tuple[str, str]] = {}

    def _snapshot_id(self) -> tuple:
        return ("tinydl.backends.cuda.context:get_context", 0)

    def prefetch(
        self,
        source: str,
        label: str = "kernel",
        entry: str = "k",
        weight: int = 1,
        later: bool = False,
    ) -> None:
        """Compiled in `function`, one at a time (the real context batches them on threads)."""
        if later:
            self._later[source] = (label, entry)

    def flush(self) -> None:
        pass

    def known(self, source: str) -> bool:
        return source in self._seen

    def compile_later(self, sources: list[str]) -> list:
        """Compiled here and now (the real context compiles them on its later threads)."""
        later, self._later = self._later, {}
        for source, (label, entry) in later.items():
            self.function(source, entry, label)
        return []

    def sync(self) -> None:
        pass

    def upload(self, host, wait: bool = True, split_tf32: bool = False):
        if split_tf32:  # as split_tf32.cu splits it on the GPU
            from tinydl.backends.cuda.kernels.conv import to_tf32

            big = to_tf32(host)
            return np.stack([big, to_tf32(np.asarray(host, np.float32) - big)])
        return np.array(host, copy=True)

    def wait_uploads(self) -> None:
        pass

    def locate(self, source: str, name: str, label: str = "kernel") -> tuple[str, str]:
        """Compiled here (its cubin kept by source); the source itself stands for its place."""
        self.function(source, name, label)
        return (source, "")

    def function_at(self, where, name: str, label: str = "kernel", smem: int = 0):
        return self.function(where[0], name, label, smem) if where[0] in self._seen else None

    def function(self, source: str, name: str, label: str = "kernel", smem: int = 0):
        if source not in self._seen:
            self._seen[source] = self._compile(source, self.arch, label)
            self.stats["compiled"] += 1
        if smem > self.smem_optin:
            raise ValueError(f"{label}: {smem} bytes of shared memory")
        return FakeFunction(name, source)
