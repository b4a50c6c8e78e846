"""The numpy backend: NumPy only. It runs every op in tinydl.ops with that op's reference code,
so it is both the reference other backends are tested against and the last fallback. ort.py
beside it is the fast CPU path (onnxruntime); backends=("cpu",) means both, fast path first.

Option "threads": NumPy's BLAS threads while this backend runs (default: `default_threads()`),
set through threadpoolctl for the run only, so the process's own setting is left alone."""

from __future__ import annotations

import contextlib
import platform
import threading

import numpy as np

from tinydl.backends.base import (
    HOST,
    Backend,
    CompileOptions,
    Kernel,
    Support,
    cpu_model,
    default_threads,
    threads_option,
)
from tinydl.errors import OpError, TinyDLError
from tinydl.ir.graph import Graph, Node
from tinydl.ops import schema_of


class _BlasThreads:
    """Limits NumPy's BLAS threads while runs are in flight. Runs from several threads share
    one limit (the first's); the last to finish restores the process's own setting, so
    concurrent runs never leave a limit behind."""

    def __init__(self):
        self._lock = threading.Lock()
        self._controller = None
        self._active = 0
        self._limiter = None

    @contextlib.contextmanager
    def limit(self, threads: int):
        with self._lock:
            if self._active == 0:
                if self._controller is None:
                    from threadpoolctl import ThreadpoolController

                    self._controller = ThreadpoolController()
                self._limiter = self._controller.limit(limits=threads, user_api="blas")
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self._limiter.restore_original_limits()
                    self._limiter = None


BLAS = _BlasThreads()


class CPUKernel(Kernel):
    def __init__(self, graph: Graph, threads: int | None = None):
        self.graph = graph
        self.threads = threads or default_threads()
        self.steps = [(node, schema_of(node.op)) for node in graph.nodes]
        last_use: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            for name in node.inputs:
                last_use[name] = i
        keep = {v.name for v in graph.outputs}
        # Free each intermediate right after its last reader, so peak memory stays low.
        self.release = [
            [n for n in dict.fromkeys(node.inputs) if n and last_use.get(n) == i and n not in keep]
            for i, node in enumerate(graph.nodes)
        ]

    snapshot = True

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["steps"]
        return state

    def restored(self) -> None:
        self.steps = [(node, schema_of(node.op)) for node in self.graph.nodes]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with BLAS.limit(self.threads):
            return self._run(inputs)

    def _run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = dict(self.graph.initializers)
        env.update(inputs)
        for (node, schema), dead in zip(self.steps, self.release, strict=True):
            args = [env[name] if name else None for name in node.inputs]
            try:
                values = schema.run(node, args)
            except TinyDLError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure inside an op is reported alike
                raise OpError(_failed(node, args, exc)) from exc
            for name, value in zip(node.outputs, values, strict=False):
                if name:
                    env[name] = np.asarray(value)
            for name in dead:
                if name not in self.graph.initializers:
                    env.pop(name, None)
        return {v.name: env[v.name] for v in self.graph.outputs}


def _failed(node, args, exc: Exception) -> str:
    given = ", ".join(
        "-" if a is None else f"{getattr(a, 'dtype', type(a).__name__)}{tuple(np.shape(a))}"
        for a in args
    )
    return f"node '{node.name}' ({node.op}) failed on inputs [{given}]: {exc}"


class CPUBackend(Backend):
    name = "numpy"
    memory = HOST

    def available(self) -> bool:
        return True

    def devices(self) -> list[str]:
        # (not platform.processor(): on Linux it runs `uname -p` in a subprocess, a few ms of
        # every start that looks a kept session up, for the architecture's name only)
        return [f"{cpu_model()}, {platform.machine()} (NumPy {np.__version__})"]

    def supports(self, node: Node, graph: Graph) -> Support:
        if schema_of(node.op) is None:
            return Support(False, f"no NumPy reference for op {node.op}")
        return Support(True)

    def compile(self, subgraph: Graph, options: CompileOptions) -> Kernel:
        return CPUKernel(subgraph, threads_option(options))
