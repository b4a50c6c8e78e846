"""tinydl's own backends as benchmark targets, through the public API only (get_backend,
tinydl.load, tinydl.compile, Session.run/profile, Backend.to_device/to_host).

A backend other than cpu runs with cpu as its fallback (`backends=(name, "cpu")`); the nodes
that fell back are counted in the target's info, and the target's device lists the devices of
the backends that ran nodes (for cpu: onnxruntime, numpy or both). `--threads` sets tinydl's
CPU threads as it sets the peers'. GPU-resident time is the sum of the per-op
device timestamps that `Session.profile()` reports with `profile=True`, inputs and outputs
staying on the device; a backend that reports none gets "n/a".
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any

import numpy as np

from tinydl.backends.base import HOST
from tinydl.bench.harness import Config, Model, Skip, Target, TransferMode


class TinydlTarget(Target):
    engine = "tinydl"

    def __init__(self, backend: str, model: Model, config: Config):
        super().__init__(f"tinydl/{backend}", model, config)
        self.backend_name = backend
        self.backends = (backend, "cpu")
        self.graph = None
        self._backend = None

    def device_init(self) -> None:
        from tinydl.backends import expand, get_backend

        backend = get_backend(self.backend_name)
        if not backend.available():
            raise Skip(backend.unavailable_reason() or "no usable device")
        self._backend = backend
        self.device = _devices(expand([self.backend_name]))

    def load(self) -> None:
        import tinydl

        with self._caches():
            self.graph = tinydl.load(self.model.path)

    def compile(self, profile: bool = False) -> Any:
        import tinydl

        with warnings.catch_warnings(record=True), self._caches():
            warnings.simplefilter("always")
            session = tinydl.compile(
                self.graph,
                backends=self.backends,
                precision=self.config.precision,
                profile=profile,
                threads=self.config.threads,
            )
        # (the first compile's: later ones of the run may read back what it kept)
        self.info.setdefault("session_cache", session.profile()["init"].get("cache"))
        counts = session.placement.counts()
        self.info["placement"] = counts
        # The devices of the backends that ran nodes ("cpu": onnxruntime, numpy or both).
        self.device = _devices([name for name in session.backends if counts.get(name)])
        self.info["fallback_nodes"] = len(session.placement.fallbacks())
        return session

    @contextlib.contextmanager
    def _caches(self):
        """The model and session caches as the config says (off: the init phases measure the
        import and the compile, not a read-back)."""
        from tinydl import snapshot

        if self.config.session_cache:
            yield
            return
        names = (snapshot.MODEL_ENV, snapshot.SESSION_ENV)
        saved = {n: os.environ.get(n) for n in names}
        os.environ.update(dict.fromkeys(names, "off"))
        try:
            yield
        finally:
            for n, v in saved.items():
                if v is None:
                    os.environ.pop(n, None)
                else:
                    os.environ[n] = v

    def run(self, inst, feeds) -> list[np.ndarray]:
        out = inst.run(feeds)
        return [out[name] for name in self.model.output_names]

    def gpu_timer(self, inst):
        if self._backend.memory == HOST:
            return None
        self.gpu_note = f"n/a: backend '{self.backend_name}' reports no device timestamps"
        backend = self._backend
        session = self.compile(profile=True)
        feeds = {n: backend.to_device(a) for n, a in self.model.feeds.items()}

        def once() -> float | None:
            session.run(feeds, outputs="device")
            ops = [
                op["seconds"]
                for op in session.profile()["ops"]
                if op["backend"] == self.backend_name and op["seconds"] is not None
            ]
            return sum(ops) if ops else None

        return once

    def transfer_modes(self) -> dict[str, TransferMode]:
        if self._backend.memory == HOST:
            return {}
        backend = self._backend
        sync = getattr(backend, "sync", None)

        def h2d(host):
            dev = backend.to_device(host)
            if sync is not None:
                sync()
            return dev

        modes = {"pageable": TransferMode(lambda a: a, h2d, lambda d, _h: backend.to_host(d))}
        # A backend with page-locked (pinned) or mapped host buffers offers them as
        # `host_buffer(shape, dtype)`; the same to_device/to_host then take the fast path.
        host_buffer = getattr(backend, "host_buffer", None)
        if host_buffer is not None:

            def pinned(a):
                buf = host_buffer(a.shape, a.dtype)
                buf[...] = a
                return buf

            modes["pinned"] = TransferMode(pinned, h2d, lambda d, _h: backend.to_host(d))
        else:
            self.info["pinned"] = "n/a: the backend has no pinned/mapped host buffers"
        return modes


def _devices(names: list[str]) -> str:
    from tinydl.backends import get_backend

    return "; ".join(d for name in names for d in get_backend(name).devices())


def tinydl_targets(backends: list[str], model: Model, config: Config) -> list[Target]:
    return [TinydlTarget(name, model, config) for name in backends]
