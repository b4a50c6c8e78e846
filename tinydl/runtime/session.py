"""Session: a model compiled for a priority list of backends, ready to run."""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, NamedTuple

import numpy as np

from tinydl.backends import CompileOptions, get_backend
from tinydl.backends import partition as partitioning
from tinydl.backends.base import Kernel, environment_options, stacked_shape
from tinydl.backends.partition import HOST, Partition, Placement, Transfer
from tinydl.errors import (
    BackendUnavailableError,
    BufferSizeError,
    InvalidInputError,
    InvalidModelError,
    InvalidShapeError,
    UnsupportedOpError,
)
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops.base import infer_graph

PRECISIONS = ("fp32", "fp16", "tf32", "auto")
PARTITION_MODES = ("greedy", "cost")


class CompiledPartition(NamedTuple):
    """One partition of a Session: the backend that runs it, the partition (nodes, inputs,
    outputs) and the compiled kernel."""

    backend: str
    partition: Partition
    kernel: Kernel


class _Run(NamedTuple):
    """One partition as a run needs it (Session._prepare_run)."""

    backend: str
    memory: str
    run: Callable[[dict[str, Any]], dict[str, Any]]
    run_host: Callable[[dict[str, Any], Any], dict[str, Any]] | None
    inputs: tuple[str, ...]
    outputs: frozenset[str]
    # outputs a later partition reads in another memory, and those one reads in this memory
    crossing: frozenset[str]
    staying: frozenset[str]
    # per outputs="host" | "device": the outputs its kernel reads back to the host (run_host)
    read_back: dict[str, Any]


class Session:
    """Run a compiled model. Build one with `tinydl.compile`.

    `source_graph` is the model as given, `graph` the optimized graph that runs, `optimization`
    the pass manager's report (node counts before and after, rewrites per pass).
    """

    def __init__(
        self,
        graph: Graph,
        backends: Sequence[str] | str | None = None,
        precision: str = "fp32",
        strict: bool = False,
        profile: bool = False,
        optimize: str = "all",
        min_partition_size: int = 1,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        memory_limit: int | None = None,
        device: str | int | None = None,
        threads: int | None = None,
        calibration: Any = None,
        fp16_tolerance: float | None = None,
        partition: str = "greedy",
        costs: Mapping[str, Any] | None = None,
    ):
        if precision not in PRECISIONS:
            raise InvalidInputError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise InvalidInputError(f"threads must be a whole number >= 1, got {threads!r}")
        chose = backends is not None
        if backends is None:
            backends = ("cpu",)
        if isinstance(backends, str):
            backends = tuple(b.strip() for b in backends.split(",") if b.strip())
        if not backends:
            raise BackendUnavailableError("no backend requested: pass backends=('cpu',) or others")
        from tinydl.backends import CPU, expand, resolve_device

        on, index = None, None
        if device is not None:
            backends, on, index = resolve_device(device, backends, default=not chose)
        self.requested = list(backends)
        # Backends that stand for one requested name ("cpu": onnxruntime, then numpy): a node
        # that goes from the first to another of them is no fallback.
        first_group = set(expand([backends[0]])) if backends[0] == CPU else {backends[0]}
        backends = expand(backends)
        chosen = []
        for name in backends:
            backend = get_backend(name)
            if index is not None and name == on:
                backend = backend.on_device(index)
            if not backend.available():
                why = backend.unavailable_reason() or "no device"
                raise BackendUnavailableError(f"backend '{name}' is not available: {why}")
            chosen.append(backend)
        self.source_graph = graph
        t_start = time.perf_counter()
        if partition not in PARTITION_MODES:
            raise InvalidInputError(
                f"partition must be one of {PARTITION_MODES}, got {partition!r}"
            )
        arguments = {
            "backends": backends,
            "precision": precision,
            "strict": strict,
            "profile": profile,
            "optimize": optimize,
            "min_partition_size": min_partition_size,
            "backend_options": backend_options,
            "memory_limit": memory_limit,
            "threads": threads,
            "calibration": calibration,
            "fp16_tolerance": fp16_tolerance,
            "costs": costs,
            "device": device,
            "partition": partition,
        }
        cached = _snapshot_path(graph, chosen, arguments)
        if cached is not None and self._restore(cached, graph, t_start):
            self._report_fallbacks(strict)  # (as the compile it was kept from did)
            return
        from tinydl.passes import PassManager  # (not imported by a start that restores)

        manager = PassManager(optimize, accepts=_accepted_by(chosen, every=partition == "cost"))
        self.graph = graph = manager.run(graph)
        self.memory_limit = memory_limit_bytes(memory_limit)
        _check_sizes(graph, graph.values, self.memory_limit)
        self.optimization = manager.report
        self.precision = precision
        # precision="auto": fp16 storage except for the values the calibration runs say need
        # float32 (runtime/precision.py); backends compile at fp16 with those kept.
        self.precision_decision = None
        fp32_values: frozenset[str] = frozenset()
        if precision == "auto":
            from tinydl.runtime.precision import decide

            self.precision_decision = decide(graph, calibration, fp16_tolerance)
            fp32_values = frozenset(self.precision_decision.fp32)
        elif fp16_tolerance is not None:
            raise InvalidInputError("fp16_tolerance goes with precision='auto'")
        elif calibration is not None and partition != "cost":
            raise InvalidInputError("calibration goes with precision='auto' or partition='cost'")
        self.backends = [b.name for b in chosen]
        self._backends = {b.name: b for b in chosen}
        self._first_group = first_group
        t_opt = time.perf_counter()
        # partition="cost": each node on the first backend or its fallback by predicted time
        # (backends/cost.py); the partitioner then runs with the backends steered so.
        self.cost_assignment = None
        placed = chosen
        if partition == "cost":
            from tinydl.backends.cost import Steered, assign, calibrate

            given = dict(costs or {})
            model = {b.name: given.get(b.name) or calibrate(b) for b in chosen}
            shapes = None
            if calibration is not None:
                from tinydl.runtime.precision import calibration_feeds

                first = calibration_feeds(graph, calibration)[0]
                shapes = {name: tuple(np.shape(a)) for name, a in first.items()}
            self.cost_assignment = assign(graph, chosen, model, shapes)
            if self.cost_assignment is not None:
                placed = [Steered(b, self.cost_assignment) for b in chosen]
        elif costs is not None:
            raise InvalidInputError("costs go with partition='cost'")
        self.placement: Placement = partitioning.partition(graph, placed, min_partition_size)
        if self.precision_decision is not None:
            self.placement.precision = self.precision_decision.nodes()
        if self.cost_assignment is not None:
            plan = self.cost_assignment
            self.placement.predicted = {
                n: plan.seconds[n].get(b, 0.0) for n, b in self.placement.nodes.items()
            }
            self.placement.predicted_transfers = dict(plan.transfer_s)
        self._report_fallbacks(strict)
        t1 = time.perf_counter()
        # Backend options: the environment's (read once, here), then the caller's; profile=True
        # asks backends for per-op device times on every run (GPU timestamps).
        given = dict(backend_options or {})
        unknown = set(given) - set(self._backends)
        if unknown:
            raise InvalidInputError(
                f"backend_options names {sorted(unknown)}, not among the backends {self.backends}"
            )
        # threads=N drives every backend that computes on the host (NumPy's BLAS threads,
        # onnxruntime's intra-op threads); a backend's own "threads" option wins.
        host_threads = {"threads": threads} if threads is not None else {}
        options = {
            name: CompileOptions(
                precision="fp16" if precision == "auto" else precision,
                fp32_values=fp32_values,
                extra={
                    **environment_options(name),
                    **(host_threads if self._backends[name].memory == HOST else {}),
                    **given.get(name, {}),
                    **({"timing": "ops"} if profile else {}),
                    # the session will be kept (tinydl/snapshot.py): backends may prepare for it
                    **({"snapshot": True} if cached is not None else {}),
                },
            )
            for name in self._backends
        }

        def _options(part: Partition) -> CompileOptions:
            """The backend's options, with the partition's inputs computed from shapes alone."""
            given = options[part.backend]
            if not part.shape_inputs:
                return given
            extra = {**given.extra, "shape_inputs": tuple(part.shape_inputs)}
            return replace(given, extra=extra)

        self._kernels = [
            (part, self._backends[part.backend].compile(part.subgraph(graph), _options(part)))
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
        self._expected = {v.name: v for v in graph.inputs}
        self._checked: set[tuple] = set()
        self._prepare_run()
        self._later = None
        if cached is not None and self._keep(cached):
            self._keep_later(cached)
        else:
            if cached is None:
                self._init["cache"] = "on, not for this model" if _session_cache_on() else "off"
            self._snapshot_done()

    # -- the session cache (tinydl/snapshot.py) -----------------------------------------------
    def _keep(self, path, field: str = "cache") -> bool:
        """Write this session to the session cache (True), or say in profile()["init"][field]
        why not."""
        from tinydl import snapshot

        kept = [b for b, k in self._kernels if not getattr(k, "snapshot", False)]
        if kept:
            names = ", ".join(sorted({p.backend for p in kept}))
            self._init[field] = f"not saved: {names} kernels are not kept between processes"
            return False
        t0 = time.perf_counter()
        self._init[field] = "saved"
        try:
            # Pickled here (under the kernels' locks: no plan is being made meanwhile),
            # written on a thread: the run need not wait for the disk.
            with contextlib.ExitStack() as locks:
                for _, kernel in self._kernels:
                    if getattr(kernel, "lock", None) is not None:
                        locks.enter_context(kernel.lock)
                snapshot.dump(
                    self,
                    path,
                    background=True,
                    then=lambda: snapshot.prune(path.parent, keep=path),
                )
        except Exception as exc:  # noqa: BLE001 - the cache only saves time: say why, go on
            self._init[field] = f"not saved: {type(exc).__name__}: {exc}"
            return False
        self._init[field + "_save_s"] = time.perf_counter() - t0
        return True

    def _keep_later(self, path) -> None:
        """A kernel whose plans are made at the first run (inputs of symbolic shape) keeps the
        contents of that run's constants; the run keeps the session again, that plan with it
        (once: `_kept_again`). Every other kernel drops what it kept for the snapshot."""
        later = any(getattr(k, "plans", True) == {} for _, k in self._kernels)
        self._later = path if later else None
        self._snapshot_done(later)

    def _kept_again(self) -> None:
        """After the first run that made a plan: keep the session again, with its plans."""
        if any(getattr(k, "plans", None) == {} for _, k in self._kernels):
            return  # (a kernel still without a plan: wait for the run that makes it)
        path, self._later = self._later, None
        if path is None:  # (another thread's run got here first)
            return
        self._keep(path, "cache_later")
        self._snapshot_done()

    def _snapshot_done(self, later: bool = False) -> None:
        for _, kernel in self._kernels:
            done = getattr(kernel, "snapshot_done", None)  # (a plug-in's kernel may lack it)
            if done is not None:
                done(later)

    def _restore(self, path, graph: Graph, t_start: float) -> bool:
        """Become the session kept at `path` (False when there is none or it cannot be read:
        the caller compiles, and keeps the result there)."""
        from tinydl import snapshot

        if not path.exists():
            return False
        try:
            kept = snapshot.load(path)
            if not isinstance(kept, Session):
                raise TypeError(f"holds a {type(kept).__name__}")
            for _, kernel in kept._kernels:
                kernel.restored()
        except Exception:  # noqa: BLE001 - a damaged or stale entry is compiled again
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return False
        self.__dict__.update(kept.__dict__)
        self.source_graph = graph
        self._last_run, self._last_moved, self._checked = [], [], set()
        self._prepare_run()
        self._init = {"cache": "hit", "restore_s": time.perf_counter() - t_start}
        snapshot.touch(path)
        self._keep_later(path)
        return True

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("source_graph", "_runs", "_last_run", "_last_moved", "_checked", "_later"):
            state.pop(name, None)
        return state

    def _prepare_run(self) -> None:
        """What every run needs, known from the plan: each partition's memory and the outputs
        its kernel reads back to the host, each value's home (the memory it is made in), each
        graph output's owner, and one backend per memory to move values in and out of it."""
        memory = self.placement.memory
        names = [v.name for v in self.graph.outputs]
        self._output_names = names
        # Each memory's mover; the backends asked, once per feed, whether a feed is theirs.
        self._movers: dict[str, Any] = {}
        for backend in self._backends.values():
            self._movers.setdefault(backend.memory, backend)
        self._claimants = list(self._backends.values())
        self._memories = list(dict.fromkeys([HOST, *self._movers]))
        # Where values are made: constants on the host, a partition's outputs in its memory.
        home: dict[str, str] = dict.fromkeys(self._constant_outputs, HOST)
        owner: dict[str, str] = {}
        for part, _ in self._kernels:
            for name in part.outputs:
                home[name], owner[name] = memory[part.backend], part.backend
        self._home = home
        # Each graph output's memory when all are made by partitions or weights (not inputs).
        self._output_homes = (
            [(n, home[n]) for n in names] if all(n in home for n in names) else None
        )
        self._output_backends = {n: owner.get(n) for n in names}
        self._known = set(names) | set(home) | set(self._expected)
        graph_outputs = set(names)
        self._runs: list[_Run] = []
        parts = [part for part, _ in self._kernels]
        for k, (part, kernel) in enumerate(self._kernels):
            here = memory[part.backend]
            later = [(memory[p.backend], i) for p in parts[k + 1 :] for i in p.inputs]
            outs = set(part.outputs)
            # Outputs a later partition reads in another memory go through the host anyway;
            # those a later partition reads in this memory must stay here.
            crossing = {i for m, i in later if m != here} & outs
            staying = {i for m, i in later if m == here} & outs
            run_host = getattr(kernel, "run_host", None) if here != HOST else None
            read_back = {
                # outputs="host": graph outputs come to the host too; "device": they stay here
                "host": frozenset((crossing | (graph_outputs & outs)) - staying),
                "device": frozenset(crossing - staying - graph_outputs),
            }
            self._runs.append(
                _Run(
                    part.backend,
                    here,
                    kernel.run,
                    run_host,
                    tuple(part.inputs),
                    frozenset(outs),
                    frozenset(crossing),
                    frozenset(staying),
                    read_back if run_host else {"host": (), "device": ()},
                )
            )

    def _report_fallbacks(self, strict: bool) -> None:
        # A node partition="cost" moved off a backend that runs it is a choice, not a fallback.
        fallbacks = {
            n: why
            for n, why in self.placement.fallbacks().items()
            if self.placement.nodes[n] not in self._first_group
            and not all(r.startswith("cost: ") for r in why.values())
        }
        if not fallbacks:
            return
        ops = sorted({self.placement.ops[n] for n in fallbacks})
        first = self.requested[0]
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

    def save(self, path) -> None:
        """Write the optimized graph (`self.graph`, fused ops included) as a .tdl file; loading
        it and compiling with optimize="none" skips the optimizer."""
        from tinydl.runtime.loader import save

        save(self.graph, path)

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

    @property
    def output_backends(self) -> dict[str, str | None]:
        """Graph output name -> the backend whose partition makes it, so a device output
        (`run(..., outputs="device")`) is that backend's tensor (`Placement.memory[backend]`
        names its memory). None for an output no partition makes: a weight (a NumPy array) or
        a graph input passed through (returned as it was fed)."""
        return dict(self._output_backends)

    # -- running --------------------------------------------------------------------------------
    def stack_input(self, name: str, arrays: Sequence[np.ndarray]) -> Any:
        """Host arrays concatenated along axis 0 as a feed for input `name`, made where the
        first partition that reads it runs: on a GPU backend each array is copied straight
        into its place in one device tensor (no host concatenation; asynchronous from the
        backend's `empty_host` memory). A batch of frames from several streams, uploaded as
        one."""
        if name not in self._expected:
            raise InvalidInputError(
                f"unknown input {name!r}: the model's inputs are {list(self._expected)}"
            )
        arrays = [a if type(a) is np.ndarray else np.asarray(a) for a in arrays]
        reader = next((r for r in self._runs if name in r.inputs), None)
        backend = self._backends[reader.backend] if reader is not None else None
        if backend is None or backend.memory == HOST:
            stacked_shape(arrays)
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        return backend.stack_to_device(arrays)

    def run(
        self, feeds: Mapping[str, Any], outputs: str | Sequence[str] = "host"
    ) -> dict[str, Any]:
        """Run the model. `feeds` maps input names to arrays (or device tensors of a backend).

        `outputs="host"` returns NumPy arrays; `"device"` returns each output as a tensor of the
        backend that produced it (`output_backends`); a list of names returns only those
        outputs, on the host.
        """
        fed = self._adopt(feeds)
        if outputs == "host" or outputs == "device":
            mode, names, wanted = outputs, self._output_names, None
        else:
            mode, names = None, [outputs] if isinstance(outputs, str) else list(outputs)
            unknown = [n for n in names if n not in self._known]
            if unknown:
                raise InvalidInputError(
                    f"unknown output(s) {unknown}: the model's outputs are {self._output_names}"
                )
            wanted = frozenset(names)
        # Values by the memory they are in; a value's home is where it was fed or made, and a
        # copy in another memory is made at most once, where a partition reads it.
        mem: dict[str, dict[str, Any]] = {m: {} for m in self._memories}
        for name, (at, value) in fed.items():
            mem[at][name] = value
        if self._constant_outputs:
            mem[HOST].update(self._constant_outputs)
        timings: list[tuple[str, float]] = []
        moved: list[tuple[Transfer, int, float]] = []
        # Outputs a kernel read back to the host itself (run_host), to be listed as transfers
        # where the plan has them: where a host partition or a host output takes them.
        read: dict[str, tuple[Transfer, int, float]] = {}
        for step in self._runs:
            here = mem[step.memory]
            args = {}
            for name in step.inputs:
                value = here.get(name)
                if value is None:
                    value = self._move(name, step.memory, mem, fed, moved)
                elif read and name in read and step.memory == HOST:
                    moved.append(read.pop(name))
                args[name] = value
            if mode is not None:
                host = step.read_back[mode]
            elif step.run_host is not None:
                host = (step.crossing | (wanted & step.outputs)) - step.staying
            else:
                host = ()
            t = time.perf_counter()
            if host:
                # The kernel reads the outputs bound for the host back itself, right after its
                # compute (no separate transfer step, no extra wait).
                out = step.run_host(args, host)
                timings.append((step.backend, time.perf_counter() - t))
                for name, value in out.items():
                    if name in host and isinstance(value, np.ndarray):
                        mem[HOST][name] = value
                        read[name] = (Transfer(name, step.memory, HOST, None), _nbytes(value), 0.0)
                    else:
                        here[name] = value
            else:
                here.update(step.run(args))
                timings.append((step.backend, time.perf_counter() - t))
        self._last_run, self._last_moved = timings, moved
        if self._later is not None:
            self._kept_again()
        if mode == "device":
            if self._output_homes is not None:
                return {n: mem[at][n] for n, at in self._output_homes}
            return {n: mem[self._where(n, fed)][n] for n in names}
        result = {}
        for name in names:
            at = self._where(name, fed)
            if at == HOST:
                result[name] = mem[HOST][name]
                continue
            value = mem[HOST].get(name)
            if value is None:
                value = self._move(name, HOST, mem, fed, moved)
            else:
                moved.append(
                    read.pop(name, None) or (Transfer(name, at, HOST, None), _nbytes(value), 0.0)
                )
            result[name] = value
        return result

    def _where(self, name: str, fed: dict[str, tuple[str, Any]]) -> str:
        """The memory a value is made in (from the plan), or for a graph input, fed in."""
        at = self._home.get(name)
        return fed[name][0] if at is None else at

    def _move(self, name: str, dst: str, mem, fed, moved) -> Any:
        """Copy a value from its home to memory `dst` (through the host) and list the transfer."""
        src = self._where(name, fed)
        t = time.perf_counter()
        host = mem[HOST].get(name)
        if host is None:
            host = mem[HOST][name] = self._movers[src].to_host(mem[src][name])
        value = host if dst == HOST else self._movers[dst].to_device(host)
        mem[dst][name] = value
        moved.append((Transfer(name, src, dst, None), _nbytes(host), time.perf_counter() - t))
        return value

    def _adopt(self, feeds: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
        """Each feed as (memory, tensor), checked against the model's inputs: a NumPy array is
        in host memory; anything else is asked of the backends, once, in priority order, and
        the first that says it is its device tensor adopts it. A combination of shapes and
        dtypes checked before is not checked again."""
        if type(feeds) is not dict and not isinstance(feeds, Mapping):
            raise InvalidInputError(
                f"feeds must be a dict of input name -> array, got {type(feeds).__name__}"
            )
        expected = self._expected
        if feeds.keys() != expected.keys():
            unknown = [k for k in feeds if k not in expected]
            if unknown:
                raise InvalidInputError(
                    f"unknown input(s) {unknown}: the model's inputs are {list(expected)}"
                )
        fed: dict[str, tuple[str, Any]] = {}
        for name in expected:
            if name not in feeds:
                break
            value = feeds[name]
            if type(value) is not np.ndarray:
                for backend in self._claimants:
                    if backend.is_device_tensor(value):
                        fed[name] = (backend.memory, backend.adopt(value))
                        break
                else:
                    fed[name] = (HOST, _native(np.asarray(value)))
                continue
            fed[name] = (HOST, _native(value))
        else:
            key = tuple((n, v.shape, v.dtype) for n, (_, v) in fed.items())
            if key in self._checked:
                return fed
        symbols: dict[str, tuple[int, str]] = {}
        for name, spec in expected.items():
            if name not in feeds:
                raise InvalidInputError(f"missing input '{name}': expected {spec.describe()}")
            value = fed[name][1]
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
        self._check_memory({n: v for n, (_, v) in fed.items()})
        if len(self._checked) < 64:
            self._checked.add(tuple((n, v.shape, v.dtype) for n, (_, v) in fed.items()))
        return fed

    def _check_memory(self, feeds: dict[str, Any]) -> None:
        """Refuse, before anything runs, feeds for which some value of the graph would be larger
        than the memory limit (a tiny file can ask for a Pad of 40,000 or a Resize x30,000)."""
        if all(all(isinstance(d, int) for d in v.shape or ()) for v in self.graph.inputs):
            return  # static inputs: checked at compile
        graph = self.graph
        concrete = Graph(
            inputs=[Value(n, _dtype_name(t.dtype), tuple(t.shape)) for n, t in feeds.items()],
            outputs=[Value(v.name) for v in graph.outputs],
            nodes=graph.nodes,
            initializers=graph.initializers,
        )
        try:
            infer_graph(concrete)
        except InvalidModelError:
            return  # the kernels report inputs that do not fit, naming the node
        _check_sizes(graph, concrete.values, self.memory_limit)

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

    def cost_report(self) -> list[dict[str, Any]]:
        """Per partition and per transfer of the last run, in run order: what it is, its
        measured seconds and, with partition="cost", its predicted seconds (None otherwise)."""
        plan = self.cost_assignment
        rows: list[dict[str, Any]] = []
        for (part, _), (backend, seconds) in zip(self._kernels, self._last_run, strict=False):
            predicted = None
            if plan is not None:
                predicted = sum(plan.seconds[n.name].get(part.backend, 0.0) for n in part.nodes)
            rows.append(
                {
                    "kind": "partition",
                    "what": f"{backend}: {len(part.nodes)} node(s)",
                    "predicted_s": predicted,
                    "measured_s": seconds,
                }
            )
        for t, nbytes, seconds in self._last_moved:
            predicted = None if plan is None else plan.transfer_s.get(t.value)
            rows.append(
                {
                    "kind": "transfer",
                    "what": f"{t.value} {t.src} -> {t.dst} ({nbytes:,} bytes)",
                    "predicted_s": predicted,
                    "measured_s": seconds,
                }
            )
        return rows

    def __repr__(self) -> str:
        counts = ", ".join(f"{b}: {n}" for b, n in self.placement.counts().items())
        return f"Session({self.graph.name!r}, backends={self.backends}, nodes: {counts})"


def compile(
    model: Graph | str | os.PathLike,
    backends: Sequence[str] | str | None = None,
    precision: str = "fp32",
    strict: bool = False,
    profile: bool = False,
    optimize: str = "all",
    min_partition_size: int = 1,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    memory_limit: int | None = None,
    device: str | int | None = None,
    threads: int | None = None,
    calibration: Any = None,
    fp16_tolerance: float | None = None,
    partition: str = "greedy",
    costs: Mapping[str, Any] | None = None,
) -> Session:
    """Compile a model (a Graph or a path) for backends in priority order (default: ("cpu",),
    the fastest CPU path here).

    precision: "fp32" (default), "fp16" (GPU backends store intermediate values in fp16 and
    compute in float32; host backends stay float32), "tf32" (float32 storage; the cuda backend
    multiplies convolutions on tf32 tensor cores, operands rounded to a 10-bit mantissa with
    float32 sums, as PyTorch does by default for cuDNN convolutions; every other backend and
    op computes as at fp32), or "auto": fp16 storage except for the
    values that need float32, decided at compile by emulating fp16 storage on the NumPy
    reference over `calibration` inputs (a feed dict or a list of them; default: one made from
    the input spec) until every output is within `fp16_tolerance` (default 1e-2: max |fp16 -
    fp32| / max |fp32|) of float32; values past fp16's range always stay float32. The
    decision: `session.precision_decision` (tinydl.runtime.precision).
    partition: "greedy" (default: each node to the first backend that runs it) or "cost": each
    node to the first backend or its fallback, whichever the predicted time says, transfers
    included (tinydl.backends.cost; `costs`: {backend name: BackendCost} instead of measuring
    the backends; `calibration` gives the input shapes where the model's are symbolic). The
    choice: `session.cost_assignment`; predicted beside measured: `session.cost_report()`.

    profile=True times every op on the device (GPU timestamps) on each run; see profile().
    optimize: the graph optimizer's level, "all" (default), "basic" or "none" (tinydl.passes).
    min_partition_size: a backend other than the last takes no partition of fewer nodes.
    backend_options: per backend name, options for its compiler, e.g.
    {"webgpu": {"fuse_elementwise": False}} (the keys: tinydl.backends.base.CompileOptions).
    memory_limit: the most bytes one tensor of the model may take (default: $TINYDL_MEMORY_LIMIT,
    e.g. "8G", else half the machine's memory); a model or input that would need more is
    refused with BufferSizeError before anything is allocated.
    device: the GPU to run on, as "NAME:INDEX" ("cuda:1", "webgpu:0": an index into
    `tinydl.list_backends()`'s device_names for that backend) or an index into the first GPU
    backend of `backends`; without backends, device="cuda:1" means backends=("cuda", "cpu").
    Default: each backend's own choice (TINYDL_CUDA_DEVICE, TINYDL_WEBGPU_ADAPTER). A device
    that does not exist is BackendUnavailableError listing the devices there are.
    threads: CPU threads of the host backends (NumPy's BLAS threads during a run, onnxruntime's
    intra-op threads); default: $OMP_NUM_THREADS (or OPENBLAS_/MKL_NUM_THREADS) when set, else
    one per physical core this process may use, at most 8 (tinydl.backends.base.default_threads).

    A model loaded from a file (and unchanged since) is compiled once: the session is kept in
    the cache folder and read back by a later compile of the same file with the same arguments,
    environment, devices and tinydl (tinydl.snapshot; `TINYDL_SESSION_CACHE=off` turns it off);
    `profile()["init"]["cache"]` says whether it was ("hit", "saved", or why not).
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
        memory_limit=memory_limit,
        device=device,
        threads=threads,
        calibration=calibration,
        fp16_tolerance=fp16_tolerance,
        partition=partition,
        costs=costs,
    )


def _session_cache_on() -> bool:
    from tinydl import snapshot

    return snapshot.enabled(snapshot.SESSION_ENV)


def _snapshot_path(graph: Graph, backends: list, arguments: dict[str, Any]):
    """Where the session cache keeps this compile, or None when it is not cached (off, or a
    model that is not an unchanged file's content)."""
    if not _session_cache_on():
        return None
    from tinydl import snapshot

    devices = [f"{b.name}: {'; '.join(b.devices())}" for b in backends]
    key = snapshot.session_key(graph, arguments, devices)
    return None if key is None else snapshot.session_path(key)


def _accepted_by(backends: list, every: bool = False) -> Callable[[Node, Node, Graph], bool]:
    """Rewrites the backends agree to: the first backend that runs the old node runs the new
    (`every`: each backend that runs the old node runs the new, so that a choice between them
    stays open, as partition="cost" needs)."""

    def accepts(new: Node, old: Node, graph: Graph) -> bool:
        for backend in backends:
            if backend.supports(old, graph):
                if not backend.supports(new, graph):
                    return False
                if not every:
                    return True
        return True

    return accepts


def _nbytes(value: Any) -> int:
    n = getattr(value, "nbytes", None)
    return int(n if n is not None else math.prod(value.shape) * np.dtype(value.dtype).itemsize)


_DTYPE_NAMES: dict = {}


MEMORY_ENV = "TINYDL_MEMORY_LIMIT"


def memory_limit_bytes(given: int | None = None) -> int:
    """The per-tensor memory limit: `given`, else $TINYDL_MEMORY_LIMIT (bytes, or with a K/M/G/T
    suffix), else half the machine's physical memory."""
    if given is not None:
        if int(given) <= 0:
            raise InvalidInputError(f"memory_limit must be a positive number of bytes, got {given}")
        return int(given)
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        scale = units.get(raw[-1].upper(), 1)
        try:
            value = float(raw[:-1] if scale > 1 else raw) * scale
        except ValueError:
            value = 0
        if value <= 0:
            raise InvalidInputError(
                f"{MEMORY_ENV}={raw!r}: expected a size such as 8G or 2000000000"
            )
        return int(value)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _check_sizes(graph: Graph, values: Mapping[str, Value], limit: int) -> None:
    producers = graph.producers()
    for name, v in values.items():
        if v.shape is None or v.dtype is None or not all(isinstance(d, int) for d in v.shape):
            continue
        nbytes = math.prod(v.shape) * np.dtype(v.dtype).itemsize
        if nbytes > limit:
            node = producers.get(name)
            made = f" made by node '{node.name}' ({node.op})" if node is not None else ""
            raise BufferSizeError(
                f"value '{name}'{made} would take {nbytes / (1 << 30):.1f} GiB "
                f"({v.dtype}{list(v.shape)}), over the memory limit of {limit / (1 << 30):.1f} GiB "
                f"(td.compile(memory_limit=...) or ${MEMORY_ENV} raise it)"
            )


def _native(array: np.ndarray) -> np.ndarray:
    """The array in this machine's byte order: a big-endian feed (`>f4`) holds the same numbers
    as float32, but its raw bytes must not reach a device as if they were native."""
    if array.dtype.isnative or array.dtype.byteorder == "|":
        return array
    return array.astype(array.dtype.newbyteorder("="))


def _dtype_name(dtype) -> str:
    """np.dtype(dtype).name, remembered (it is slow enough to show in a GPU-resident loop)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = np.dtype(dtype).name
    return name
