"""Session: a model compiled for a priority list of backends, ready to run."""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, NamedTuple

import numpy as np

from tinydl.backends import CompileOptions, get_backend
from tinydl.backends.base import Kernel, environment_options
from tinydl.backends.partition import (
    HOST,
    Partition,
    Placement,
    Transfer,
    location,
    partition,
)
from tinydl.errors import (
    BackendUnavailableError,
    InvalidInputError,
    InvalidShapeError,
    UnsupportedOpError,
)
from tinydl.ir.graph import Graph, Node, Value
from tinydl.passes import PassManager

PRECISIONS = ("fp32", "fp16")


class CompiledPartition(NamedTuple):
    """One partition of a Session: the backend that runs it, the partition (nodes, inputs,
    outputs) and the compiled kernel."""

    backend: str
    partition: Partition
    kernel: Kernel


class Session:
    """Run a compiled model. Build one with `tinydl.compile`.

    `source_graph` is the model as given, `graph` the optimized graph that runs, `optimization`
    the pass manager's report (node counts before and after, rewrites per pass).
    """

    def __init__(
        self,
        graph: Graph,
        backends: Sequence[str] = ("cpu",),
        precision: str = "fp32",
        strict: bool = False,
        profile: bool = False,
        optimize: str = "all",
        min_partition_size: int = 1,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if isinstance(backends, str):
            backends = tuple(b.strip() for b in backends.split(",") if b.strip())
        if not backends:
            raise BackendUnavailableError("no backend requested: pass backends=('cpu',) or others")
        chosen = []
        for name in backends:
            backend = get_backend(name)
            if not backend.available():
                why = backend.unavailable_reason() or "no device"
                raise BackendUnavailableError(f"backend '{name}' is not available: {why}")
            chosen.append(backend)
        self.source_graph = graph
        t_start = time.perf_counter()
        manager = PassManager(optimize, accepts=_accepted_by(chosen))
        self.graph = graph = manager.run(graph)
        self.optimization = manager.report
        self.precision = precision
        self.backends = [b.name for b in chosen]
        self._backends = {b.name: b for b in chosen}
        t_opt = time.perf_counter()
        self.placement: Placement = partition(graph, chosen, min_partition_size)
        self._report_fallbacks(strict)
        t1 = time.perf_counter()
        # Backend options: the environment's (read once, here), then the caller's; profile=True
        # asks backends for per-op device times on every run (GPU timestamps).
        given = dict(backend_options or {})
        unknown = set(given) - set(self._backends)
        if unknown:
            raise ValueError(
                f"backend_options names {sorted(unknown)}, not among the backends {self.backends}"
            )
        options = {
            name: CompileOptions(
                precision=precision,
                extra={
                    **environment_options(name),
                    **given.get(name, {}),
                    **({"timing": "ops"} if profile else {}),
                },
            )
            for name in self._backends
        }
        self._kernels = [
            (
                part,
                self._backends[part.backend].compile(part.subgraph(graph), options[part.backend]),
            )
            for part in self.placement.partitions
        ]
        self._constant_outputs = {
            v.name: graph.initializers[v.name]
            for v in graph.outputs
            if v.name in graph.initializers
        }
        self._init = {
            "optimize_s": t_opt - t_start,
            "partition_s": t1 - t_opt,
            "compile_s": time.perf_counter() - t1,
        }
        self._last_run: list[tuple[str, float]] = []
        self._last_moved: list[tuple[Transfer, int, float]] = []
        # The plan's steps with each partition's kernel; the transfers after the last partition
        # bring graph outputs to the host and run only when host outputs are asked for.
        kernels = {id(part): (k, kernel) for k, (part, kernel) in enumerate(self._kernels)}
        self._steps = [(step, kernels.get(id(step))) for step in self.placement.plan]
        self._tail = max((i + 1 for i, (_, kernel) in enumerate(self._steps) if kernel), default=0)
        # Per partition: outputs that a later partition of another backend reads (so they go
        # to the host anyway), and those a later partition of the same backend reads.
        self._crossing: list[set[str]] = []
        self._staying: list[set[str]] = []
        parts = self.placement.partitions
        for k, part in enumerate(parts):
            later = [(p.backend, i) for p in parts[k + 1 :] for n in p.nodes for i in n.inputs]
            self._crossing.append({i for b, i in later if b != part.backend} & set(part.outputs))
            self._staying.append({i for b, i in later if b == part.backend} & set(part.outputs))
        # A one-partition session whose device outputs are asked for with device feeds takes
        # a short path (a video pipeline's steady state); feed types already checked are
        # remembered so that path does not re-check every dimension.
        self._single = None
        if len(self._kernels) == 1 and not self._constant_outputs:
            part, kernel = self._kernels[0]
            names = {v.name for v in graph.inputs}, {v.name for v in graph.outputs}
            if set(part.inputs) == names[0] and names[1] <= set(part.outputs):
                self._single = (part.backend, kernel, [v.name for v in graph.outputs])
        self._checked: set[tuple] = set()
        self._expected = {v.name: v for v in graph.inputs}

    def _report_fallbacks(self, strict: bool) -> None:
        fallbacks = self.placement.fallbacks()
        if not fallbacks:
            return
        ops = sorted({self.placement.ops[n] for n in fallbacks})
        first = self.backends[0]
        if strict:
            detail = "\n  ".join(
                f"{n} ({self.placement.ops[n]}): {'; '.join(f'{b}: {r}' for b, r in why.items())}"
                for n, why in fallbacks.items()
            )
            raise UnsupportedOpError(
                f"strict=True and backend '{first}' refuses {len(fallbacks)} node(s):\n  {detail}"
            )
        warnings.warn(
            f"{len(fallbacks)} node(s) fall back from '{first}' (ops: {', '.join(ops)}); "
            "see Session.placement for the reasons, or pass strict=True to make this an error",
            stacklevel=3,
        )

    @property
    def partitions(self) -> list[CompiledPartition]:
        """The compiled partitions in run order: each one's backend, nodes, boundary values and
        the backend's compiled kernel (its `profile()` and, on GPU backends, its plans)."""
        return [CompiledPartition(p.backend, p, k) for p, k in self._kernels]

    @property
    def inputs(self) -> list[Value]:
        return list(self.graph.inputs)

    @property
    def outputs(self) -> list[Value]:
        return list(self.graph.outputs)

    # -- running --------------------------------------------------------------------------------
    def run(
        self, feeds: Mapping[str, Any], outputs: str | Sequence[str] = "host"
    ) -> dict[str, Any]:
        """Run the model. `feeds` maps input names to arrays (or device tensors of a backend).

        `outputs="host"` returns NumPy arrays; `"device"` returns tensors of the backend that
        produced them; a list of names returns only those outputs, on the host.
        """
        env = self._check_feeds(feeds)
        if outputs == "device" and self._single is not None:
            name, kernel, names = self._single
            backend = self._backends[name]
            if all(backend.is_device_tensor(v) for v in env.values()):
                t = time.perf_counter()
                out = kernel.run(env)
                self._last_run, self._last_moved = [(name, time.perf_counter() - t)], []
                return {n: out[n] for n in names}
        # Values by the memory they are in (HOST or a device backend's name), and the memory
        # each was fed or made in: its home.
        mem: dict[str, dict[str, Any]] = {HOST: {}}
        home: dict[str, str] = {}
        for name, value in env.items():
            home[name] = self._location_of(value)
            mem.setdefault(home[name], {})[name] = value
        # An output may be a weight (e.g. a folded Constant) that no partition produces.
        mem[HOST].update(self._constant_outputs)
        wanted = (
            set()
            if outputs == "device"
            else {v.name for v in self.graph.outputs}
            if (outputs == "host")
            else set(outputs)
        )
        timings, moved = [], []
        for i, (step, compiled) in enumerate(self._steps):
            if compiled is None:
                if i < self._tail or step.value in wanted:
                    moved.append(self._move(step.value, step.dst, mem, home))
                continue
            k, kernel = compiled
            part, here = step, location(step.backend)
            args = {}
            for name in part.inputs:
                if name not in mem.get(here, {}):
                    # Not in the plan: a device tensor fed for another backend's partition.
                    moved.append(self._move(name, here, mem, home))
                args[name] = mem[here][name]
            t = time.perf_counter()
            # A kernel with run_host reads the outputs bound for the host back itself, right
            # after its compute (no separate transfer step, no extra wait).
            host = (self._crossing[k] | (wanted & set(part.outputs))) - self._staying[k]
            run_host = getattr(kernel, "run_host", None)
            out = run_host(args, host) if host and run_host else kernel.run(args)
            timings.append((part.backend, time.perf_counter() - t))
            for name, value in out.items():
                home[name] = here
                at = HOST if name in host and isinstance(value, np.ndarray) else here
                mem.setdefault(at, {})[name] = value
        self._last_run, self._last_moved = timings, moved
        if outputs == "device":
            return {v.name: self._find(v.name, mem, home) for v in self.graph.outputs}
        names = [v.name for v in self.graph.outputs] if outputs == "host" else list(outputs)
        unknown = [n for n in names if self._find(n, mem, home) is None]
        if unknown:
            raise InvalidInputError(
                f"unknown output(s) {unknown}: the model's outputs are "
                f"{[v.name for v in self.graph.outputs]}"
            )
        return {n: self._to_host(self._find(n, mem, home)) for n in names}

    def _location_of(self, value: Any) -> str:
        for backend in self._backends.values():
            if backend.is_device_tensor(value):
                return location(backend.name)
        return HOST

    @staticmethod
    def _find(name: str, mem: dict[str, dict[str, Any]], home: dict[str, str]) -> Any:
        for at in (home.get(name, HOST), HOST, *mem):
            if name in mem.get(at, {}):
                return mem[at][name]
        return None

    def _move(self, name: str, dst: str, mem, home) -> tuple[Transfer, int, float]:
        """Copy a value to memory `dst` (through the host); its bytes and seconds."""
        src = home.get(name, HOST)
        there = mem.setdefault(dst, {})
        if name in there:
            # Already there: fed there, or read back in the submission of the kernel that made it.
            return Transfer(name, src, dst, None), 0 if src == dst else _nbytes(there[name]), 0.0
        t = time.perf_counter()
        host = mem[HOST].get(name)
        if host is None:
            value = self._find(name, mem, home)
            host = mem[HOST][name] = self._backends[src].to_host(value) if src != HOST else value
        if dst != HOST:
            there[name] = self._backends[dst].to_device(host)
        return Transfer(name, src, dst, None), _nbytes(host), time.perf_counter() - t

    def _to_host(self, value: Any) -> np.ndarray:
        for backend in self._backends.values():
            if backend.is_device_tensor(value):
                return backend.to_host(value)
        return np.asarray(value)

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(feeds, Mapping):
            raise InvalidInputError(
                f"feeds must be a dict of input name -> array, got {type(feeds).__name__}"
            )
        expected = self._expected
        if len(feeds) != len(expected) or any(k not in expected for k in feeds):
            unknown = [k for k in feeds if k not in expected]
            if unknown:
                raise InvalidInputError(
                    f"unknown input(s) {unknown}: the model's inputs are {list(expected)}"
                )
        symbols: dict[str, tuple[int, str]] = {}
        env: dict[str, Any] = {}
        for name in expected:
            if name not in feeds:
                break
            value = feeds[name]
            owner = next((b for b in self._backends.values() if b.is_device_tensor(value)), None)
            env[name] = np.asarray(value) if owner is None else owner.adopt(value)
        else:
            key = tuple((n, v.shape, v.dtype) for n, v in env.items())
            if key in self._checked:
                return env
        for name, spec in expected.items():
            if name not in feeds:
                raise InvalidInputError(f"missing input '{name}': expected {spec.describe()}")
            value = env[name]
            dtype = _dtype_name(value.dtype)
            if spec.dtype is not None and dtype != spec.dtype:
                raise InvalidShapeError(
                    f"input '{name}': expected dtype {spec.dtype}, got {dtype} "
                    f"(convert with .astype(np.{spec.dtype}))"
                )
            shape = tuple(value.shape)
            if spec.shape is not None:
                if len(shape) != len(spec.shape):
                    raise InvalidShapeError(
                        f"input '{name}': expected rank {len(spec.shape)} {spec.describe()}, "
                        f"got shape {shape}"
                    )
                for axis, (want, got) in enumerate(zip(spec.shape, shape, strict=True)):
                    if isinstance(want, int) and want != got:
                        raise InvalidShapeError(
                            f"input '{name}': expected {spec.describe()}, got shape {shape} "
                            f"(dim {axis} must be {want})"
                        )
                    if isinstance(want, str):
                        seen = symbols.setdefault(want, (got, name))
                        if seen[0] != got:
                            raise InvalidShapeError(
                                f"input '{name}': dim {axis} ('{want}') is {got}, but '{want}' is "
                                f"{seen[0]} in input '{seen[1]}'"
                            )
            env[name] = value
        if len(self._checked) < 64:
            self._checked.add(tuple((n, v.shape, v.dtype) for n, v in env.items()))
        return env

    # -- reporting ------------------------------------------------------------------------------
    def profile(self) -> dict[str, Any]:
        """Init costs and the per-partition times of the last run, in seconds.

        A partition whose kernel reports more (GPU backends: weight upload, shader compile,
        first run; with `profile=True`, per-op device times of the last run) adds it under
        "partitions"; "ops" lists every op's device time of the last run.
        """
        parts, ops = [], []
        for part, kernel in self._kernels:
            report = getattr(kernel, "profile", None)
            entry = {"backend": part.backend, **(report() if report else {})}
            parts.append(entry)
            ops += [
                {"backend": part.backend, "op": name, "seconds": s}
                for name, s in entry.get("ops") or []
            ]
        moved = [
            {"value": t.value, "src": t.src, "dst": t.dst, "bytes": n, "seconds": s}
            for t, n, s in self._last_moved
        ]
        return {
            "init": dict(self._init),
            "optimize": asdict(self.optimization),
            "last_run": [{"backend": b, "seconds": s} for b, s in self._last_run],
            "partitions": parts,
            "ops": ops,
            "transfers": moved,
            "bytes_moved": sum(m["bytes"] for m in moved),
        }

    def __repr__(self) -> str:
        counts = ", ".join(f"{b}: {n}" for b, n in self.placement.counts().items())
        return f"Session({self.graph.name!r}, backends={self.backends}, nodes: {counts})"


def compile(
    model: Graph | str | os.PathLike,
    backends: Sequence[str] | str = ("cpu",),
    precision: str = "fp32",
    strict: bool = False,
    profile: bool = False,
    optimize: str = "all",
    min_partition_size: int = 1,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> Session:
    """Compile a model (a Graph or a path) for backends in priority order.

    profile=True times every op on the device (GPU timestamps) on each run; see profile().
    optimize: the graph optimizer's level, "all" (default), "basic" or "none" (tinydl.passes).
    min_partition_size: a backend other than the last takes no partition of fewer nodes.
    backend_options: per backend name, options for its compiler, e.g.
    {"webgpu": {"fuse_elementwise": False}} (the keys: tinydl.backends.base.CompileOptions).
    """
    if not isinstance(model, Graph):
        from tinydl.runtime.loader import load

        model = load(model)
    return Session(
        model,
        backends=backends,
        precision=precision,
        strict=strict,
        profile=profile,
        optimize=optimize,
        min_partition_size=min_partition_size,
        backend_options=backend_options,
    )


def _accepted_by(backends: list) -> Callable[[Node, Node, Graph], bool]:
    """Rewrites the backends agree to: the first backend that runs the old node runs the new."""

    def accepts(new: Node, old: Node, graph: Graph) -> bool:
        for backend in backends:
            if backend.supports(old, graph):
                return bool(backend.supports(new, graph))
        return True

    return accepts


def _nbytes(value: Any) -> int:
    n = getattr(value, "nbytes", None)
    return int(n if n is not None else math.prod(value.shape) * np.dtype(value.dtype).itemsize)


_DTYPE_NAMES: dict = {}


def _dtype_name(dtype) -> str:
    """np.dtype(dtype).name, remembered (it is slow enough to show in a GPU-resident loop)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = np.dtype(dtype).name
    return name
