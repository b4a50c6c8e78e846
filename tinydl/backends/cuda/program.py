"""CUDA plans (backends/planned.py makes them), replayed as CUDA graphs.

What is CUDA's own: values that become known constants once shapes are (a Shape of a fixed
input) are computed when the plan is made; conv epilogues take residual Adds, small-conv
chains become one kernel (kernels/chain.py) and attention one (kernels/attention.py); buffers
are CuPy arrays; steps are launches.

Running: the first run of a plan launches its kernels one by one on the caller's current CuPy
stream. Later runs replay a CUDA graph captured from the same launches. A graph bakes in the
addresses of its inputs and outputs, so graphs are kept per set of input addresses (a loop
that feeds the same buffers replays one graph), and per set of output buffers: a graph whose
outputs the caller still holds is not replayed over them; another is captured (up to
MAX_GRAPHS per plan, then runs are launched one by one into fresh outputs). Nothing here
waits for the GPU unless outputs go to the host.
"""

from __future__ import annotations

import collections
import concurrent.futures
import sys
import time
import warnings
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tinydl.backends import planned
from tinydl.backends.cuda.context import CompileError, empty_pinned, host_copies
from tinydl.backends.cuda.kernels import CTYPES, REGISTRY, render
from tinydl.backends.cuda.kernels.attention import MAX_DIM
from tinydl.backends.fusion import (
    fuse,
    fuse_attention,
    fuse_bn_activations,
    fuse_channel_norms,
    fuse_elementwise,
    fuse_residuals,
)

MAX_GRAPHS = 8
GENERIC_MODES = ("first", "off", "only")
ALIGN = 256


@dataclass
class Info(planned.Info):
    """A value's concrete type in a plan; `stype` is the NumPy name of the stored dtype."""

    @property
    def ctype(self) -> str:
        return CTYPES[self.stype]

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.stype).itemsize


@dataclass(frozen=True)
class _Deferred:
    """A kernel function not yet looked up: its module may still be compiling. `where`: the
    cubin and entry suffix that held it when the plan was made (`Context.locate`), kept in a
    snapshot so that a session read back loads its kernels straight from there."""

    source: str
    entry: str
    label: str
    smem: int
    where: tuple[str, str] | None = None


@dataclass
class Launch:
    fn: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list  # value names (str), device arrays, or NumPy scalars
    smem: int
    label: str
    deferred: _Deferred | None = None  # where `fn` came from (a snapshot keeps this instead)
    # A generic kernel run until the step's own compiles: (its _Deferred, args, grid).
    upgrade: tuple[_Deferred, list, tuple] | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.deferred is not None:
            state["fn"] = self.deferred
        return state


class Build(planned.Build):
    def launch(
        self,
        template: str,
        args: list,
        grid,
        threads,
        *,
        entry: str = "k",
        smem: int = 0,
        label: str = "",
        weight: int = 1,
        generic: tuple | None = None,
        **params,
    ) -> None:
        """Render `template` with `params`, start compiling it (cached) and append a launch of
        its function `entry` on `grid` x `threads`; `args` are value names, uploaded constants
        or scalars (NumPy's, structured ones as C structs). The function is looked up once
        every kernel of the plan is compiling (`Plan.finish`). `weight`: how many small
        kernels' compile time this one takes (it spreads the compiling over threads).
        `generic`: (args, params[, grid]) of the same template rendered for any layer of its
        kind (on `grid` where its own differs): where the specialized kernel is not compiled
        yet (nor in the disk cache), the plan runs the generic one first and compiles the
        specialized one after (backend option "generic_kernels")."""
        label = label or self.label
        source = render(template, label=label, **params)
        upgrade = None
        mode = self.plan.generic_mode
        grid, threads = self._checked(grid), self._extents(threads)
        if generic is not None and mode != "off":
            if mode == "only" or not self.ctx.known(source):
                if mode != "only":
                    self.ctx.prefetch(source, label, entry, weight, later=True)
                    upgrade = (
                        _Deferred(source, entry, label, smem),
                        [self._resolve(a) for a in args],
                        grid,
                    )
                gparams = dict(generic[1])
                args = generic[0]
                if len(generic) > 2 and generic[2] is not None:
                    grid = self._checked(generic[2])
                source = render(template, label=gparams.pop("label", label), **gparams)
        self.ctx.prefetch(source, label, entry, weight)
        fn = _Deferred(source, entry, label, smem)
        args = [self._resolve(a) for a in args]
        self.plan.steps.append(Launch(fn, grid, threads, args, smem, label, upgrade=upgrade))

    def _checked(self, grid) -> tuple[int, int, int]:
        grid = self._extents(grid)
        if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
            raise ValueError(f"{self.label}: grid {grid} exceeds the device's limits")
        return grid

    @staticmethod
    def _extents(extents) -> tuple[int, int, int]:
        """A grid or block as three ints (1 for those not given)."""
        given = extents if isinstance(extents, tuple | list) else (extents,)
        return tuple(int(e) for e in given) + (1,) * (3 - len(given))

    def _resolve(self, arg):
        """A value name stays a name unless it is a constant (a weight, or a value the plan
        computed from shapes: GPT-2's position embeddings at a symbolic length, which stayed a
        name before and read a buffer nothing wrote): then its uploaded array."""
        if isinstance(arg, str) and self.plan.root(arg) not in self.plan.input_names:
            # (a view of a constant, as an Identity of a weight the exporter shared, is one)
            value = self.plan.const(self.plan.root(arg))
            if value is not None:
                info = self.plan.infos.get(arg)
                if info is not None and tuple(value.shape) != tuple(info.shape):
                    value = value.reshape(info.shape)
                return self.plan.owner.constant(("value", arg), value)
        return arg

    def upload(self, key, array: np.ndarray, dtype: str | None = None, **how):
        """Upload a constant (packed weights, tables) once per compiled kernel; `how`: as
        Context.upload takes it (split_tf32=True: two tf32 parts, split on the GPU)."""
        array = np.ascontiguousarray(
            array if dtype is None else np.asarray(array).astype(dtype, copy=False)
        )
        label = (self.node.name, key, array.dtype.name, *sorted(how.items()))
        return self.plan.owner.constant(label, array, **how)


class _Graph:
    """A captured CUDA graph and the output buffers it writes."""

    def __init__(self, graph, roots: dict[str, Any]):
        self.graph, self.roots = graph, roots
        self.base = {n: self._refs(a) for n, a in roots.items()}

    @staticmethod
    def _refs(a) -> tuple[int, int, int]:
        # The array itself may be handed out; its views share its MemoryPointer or make new
        # ones over its memory; DLPack exports hold the array. Whichever way the caller holds
        # on to the output, one of these counts is up.
        ptr = a.data
        return sys.getrefcount(a), sys.getrefcount(ptr), sys.getrefcount(ptr.mem)

    def free(self) -> bool:
        """True when no array the caller holds still points into this graph's outputs."""
        for n, a in self.roots.items():
            x, y, z = self._refs(a)
            bx, by, bz = self.base[n]
            if x > bx or y > by or z > bz:
                return False
        return True


class Plan(planned.Plan):
    build_class = Build
    registry = REGISTRY

    def __init__(self, owner: CUDAKernel, inputs: dict[str, Info]):
        self.cp = owner.ctx.cp
        super().__init__(owner, inputs)
        self.graphs: collections.OrderedDict = collections.OrderedDict()
        self.ran = False

    def rewrite(self, body, keep, shape_of, types):
        nodes = fuse(body, keep, shape_of, lambda n: n.op != "ConvTranspose")
        nodes = fuse_channel_norms(nodes, keep, shape_of)
        nodes = fuse_attention(nodes, keep, shape_of, types, self.const, MAX_DIM)
        nodes = fuse_bn_activations(nodes, keep, body, shape_of)
        nodes = fuse_residuals(nodes, keep, shape_of, body)
        # extra["fuse_elementwise"] = False (TINYDL_CUDA_ELEMENTWISE=off): one launch per op.
        if self.owner.extra.get("fuse_elementwise", True):
            nodes = fuse_elementwise(nodes, keep, body, types)
        return nodes

    @classmethod
    def holds(cls, dtype: str) -> bool:
        return dtype in CTYPES

    def value_info(self, shape, dtype, is_output) -> Info:
        f16 = self.precision == "fp16" and dtype == "float32" and not is_output
        return Info(shape, dtype, "float16" if f16 else dtype)

    def const_info(self, value) -> Info:
        return Info(tuple(value.shape), value.dtype.name, value.dtype.name)

    @property
    def generic_mode(self) -> str:
        """Backend option "generic_kernels": "first" (default), "off" or "only"."""
        mode = self.owner.extra.get("generic_kernels", "first")
        if mode not in GENERIC_MODES:
            raise ValueError(
                f"backend option generic_kernels: expected one of {GENERIC_MODES}, got {mode!r}"
            )
        return mode

    def finish(self) -> None:
        """Compile the plan's kernels together on the NVRTC threads and load their functions;
        wait for its constants' copies (uploaded without waiting, meanwhile). Steps running a
        generic kernel have their own compiled after, on the later threads (`upgrade`)."""
        self.ctx.flush()
        for step in self.steps:
            if isinstance(step, Launch) and isinstance(step.fn, _Deferred):
                try:
                    self._load(step, step.fn)
                except CompileError as exc:
                    if not step.upgrade:
                        raise
                    # A generic kernel that does not compile: the step's own, from the start.
                    warnings.warn(
                        f"{step.fn.label}: its generic kernel did not compile, its own runs "
                        f"from the start ({str(exc).splitlines()[0]})",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    d, step.args, step.grid = step.upgrade
                    step.upgrade = None
                    self._load(step, d)
        t0 = time.perf_counter()
        self.ctx.wait_uploads()
        self.owner.init["weights_s"] += time.perf_counter() - t0  # (queued in `constant`)
        later = [step.upgrade[0] for step in self.steps if getattr(step, "upgrade", None)]
        self.generic_steps = len(later)
        self.generic_failed = 0  # steps left generic: their own kernel did not compile
        self.upgrading = self.ctx.compile_later([d.source for d in later]) if later else None
        self.upgraded_at = None
        self._finished = time.perf_counter()

    def _load(self, step: Launch, d: _Deferred) -> None:
        """Step's function: `d`'s, compiled (waiting for it) or read from the disk cache."""
        where = self.ctx.locate(d.source, d.entry, d.label)
        step.fn = self.ctx.function_at(where, d.entry, d.label, d.smem) or (
            self.ctx.function(d.source, d.entry, d.label, d.smem)  # (cache emptied)
        )
        step.deferred = replace(d, where=where)

    def upgrade(self, wait: bool = False) -> bool:
        """Switch the steps running generic kernels to their own once those are compiled (or
        now, waiting for them, with `wait`); True when no step is left generic. The captured
        graphs hold the generic kernels: they are dropped (after the GPU is done with them)
        and captured again on the next runs. A specialized kernel that fails to compile
        leaves its step generic, with a warning naming it."""
        if self.upgrading is None:
            return True
        if not wait and not all(f.done() for f in self.upgrading):
            return False
        with self.owner.lock:
            if self.upgrading is None:
                return True
            concurrent.futures.wait(self.upgrading)
            for step in self.steps:
                if not getattr(step, "upgrade", None):
                    continue
                d, args, grid = step.upgrade
                generic = step.fn, step.deferred
                try:
                    self._load(step, d)
                except Exception as exc:  # noqa: BLE001 - reported; the generic one still runs
                    step.fn, step.deferred = generic
                    warnings.warn(
                        f"{d.label}: its specialized kernel did not compile, the generic one "
                        f"stays ({type(exc).__name__}: {str(exc).splitlines()[0]})",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    step.upgrade = None
                    self.generic_failed += 1
                    continue
                step.args, step.grid, step.upgrade = args, grid, None
            if self.graphs:
                with self.ctx.device:  # (a graph may still be running, on any stream)
                    self.cp.cuda.runtime.deviceSynchronize()
                self.graphs.clear()
            self.upgrading = None
            self.upgraded_at = time.perf_counter() - self._finished
        return True

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for name in ("cp", "views"):
            state.pop(name, None)
        state.update(graphs=collections.OrderedDict(), ran=False, upgrading=None)
        return state

    def restored(self) -> None:
        """Buffers and their views again; each kernel loaded from the cubin that held it (or
        found in the kernel cache again, or compiled, if the cache was emptied since)."""
        self.cp = self.ctx.cp
        super().restored()
        self.views = {r: self._view(slot, r) for r, slot in self.buffers.items()}
        for step in self.steps:
            if getattr(step, "upgrade", None) and self.ctx.known(step.upgrade[0].source):
                # (its own kernel compiled since the snapshot was made)
                step.fn, step.args, step.grid = step.upgrade
                step.upgrade = None
            elif getattr(step, "upgrade", None):
                d = step.upgrade[0]
                self.ctx.prefetch(d.source, d.label, d.entry, later=True)
            if isinstance(step, Launch) and isinstance(step.fn, _Deferred):
                d = step.fn
                fn = d.where and self.ctx.function_at(d.where, d.entry, d.label, d.smem)
                if fn:
                    step.fn, step.deferred = fn, d
                else:
                    self.ctx.prefetch(d.source, d.label, d.entry)
        self.finish()

    def arrange(self, keep, types) -> None:
        from tinydl.backends.cuda.kernels.chain import fuse_chains

        # A value kept in float32 (precision="auto") ends a chain: it is stored, in float32.
        self.nodes = fuse_chains(self, self.nodes, keep | self.owner.fp32_values, types)

    def nbytes(self, info: Info) -> int:
        return info.nbytes

    def new_buffer(self, nbytes: int):
        with self.ctx.device:
            return self.cp.empty((nbytes + ALIGN - 1) // ALIGN * ALIGN, self.cp.uint8)

    def buffer_size(self, buffer) -> int:
        return buffer.size

    def _allocate(self) -> None:
        super()._allocate()
        self.views = {r: self._view(slot, r) for r, slot in self.buffers.items()}
        self.out_specs = []
        for name in self.output_names:
            info = self.infos.get(name) or self.infos.get(self.root(name))
            shape = None if info is None else info.shape
            self.out_specs.append((name, self.const_outputs.get(name), self.root(name), shape))
        self.scratch_bytes = sum({id(s): s.size for s in self.buffers.values()}.values())

    def _view(self, slot, name: str):
        info = self.infos[name]
        return self.cp.ndarray(info.shape, info.stype, memptr=slot.data)

    def _new_outputs(self) -> dict[str, Any]:
        cp = self.cp
        return {r: cp.empty(self.infos[r].shape, self.infos[r].stype) for r in self.output_roots}

    # -- running -------------------------------------------------------------------------------
    def _args(self, step: Launch, env: dict[str, Any]) -> tuple:
        return tuple(env[self.root(a)] if isinstance(a, str) else a for a in step.args)

    def _launch_all(self, env, events=None) -> None:
        for k, step in enumerate(self.steps):
            if events is not None:
                events[2 * k].record()
            step.fn(step.grid, step.block, self._args(step, env), shared_mem=step.smem)
            if events is not None:
                events[2 * k + 1].record()

    def run(self, feeds: dict[str, Any], host: Collection[str], timing: str | None, graphs: bool):
        cp = self.cp
        pending = None
        # One thread at a time: graphs are chosen by which outputs the caller still holds.
        if self.upgrading is not None:
            self.upgrade()
        with self.owner.lock, self.ctx.device:
            stream = cp.cuda.get_current_stream()
            if graphs and self.ran and timing != "ops" and self.steps:
                # The steady state: replay a captured graph (kept short: this is per frame).
                g = self._graph_for(feeds, stream)
                if g is not None:
                    events = self._events(1) if timing else None
                    if events:
                        events[0].record(stream)
                    g.graph.launch(stream)
                    if events:
                        events[1].record(stream)
                        pending = (events, ["total"])
                    return self._results(g.roots, feeds, host, stream), pending
            env = self._env(feeds)
            outs = self._new_outputs()
            env.update(outs)
            events = self._events(len(self.steps) if timing == "ops" else 1) if timing else None
            if timing == "total":
                events[0].record(stream)
            self._launch_all(env, events if timing == "ops" else None)
            if timing == "total":
                events[1].record(stream)
            if events is not None:
                labels = [s.label for s in self.steps] if timing == "ops" else ["total"]
                pending = (events, labels)
            self.ran = True
            return self._results(outs, feeds, host, stream), pending

    def _env(self, feeds) -> dict[str, Any]:
        env: dict[str, Any] = dict(self.views)
        for name in self.input_names:
            env[name] = feeds[name]
        return env

    def _events(self, count: int) -> list:
        return [self.cp.cuda.Event() for _ in range(2 * max(count, 1))]

    def _results(self, outs, feeds, host, stream) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for name, const, root, shape in self.out_specs:
            if const is not None:
                arr = const
            else:
                arr = outs[root] if root in outs else feeds[root]
                if arr.shape != shape:
                    arr = arr.reshape(shape)
            if name in host:
                arr = self.owner.to_host(arr, stream)
            results[name] = arr
        return results

    def _graph_for(self, feeds, stream) -> _Graph | None:
        key = tuple(feeds[n].data.ptr for n in self.input_names)
        held = self.graphs.get(key, [])
        for g in held:
            if g.free():
                self.graphs.move_to_end(key)
                return g
        total = sum(len(v) for v in self.graphs.values())
        if total >= MAX_GRAPHS:
            # Make room by dropping the least recently used graph nobody's outputs pin.
            for k, gs in list(self.graphs.items()):
                idle = [g for g in gs if g.free()]
                if idle:
                    gs.remove(idle[0])
                    if not gs:
                        del self.graphs[k]
                    break
            else:
                return None
        roots = self._new_outputs()
        capture = self.ctx.capture_stream
        # The capture stream must see the caller's earlier work on the inputs.
        capture.wait_event(stream.record())
        genv = self._env(feeds)
        genv.update(roots)
        with capture:
            capture.begin_capture()
            try:
                self._launch_all(genv)
            finally:
                graph = capture.end_capture()
        graph.upload(stream)
        del genv  # (it holds the output arrays: _Graph counts references to them)
        g = _Graph(graph, roots)
        self.graphs.setdefault(key, []).append(g)
        self.graphs.move_to_end(key)
        return g


class CUDAKernel(planned.PlannedKernel):
    """A partition compiled for CUDA."""

    plan_class = Plan
    snapshot = True

    def __init__(self, ctx, graph, options):
        self.use_graphs: bool = bool(dict(options.extra).get("cuda_graphs", True))
        self._hosts: dict[int, tuple] = {}  # id(constant) -> (it, its host contents, how)
        self._snapshot_done = False  # True once kept (or not to be): no more host contents
        super().__init__(ctx, graph, options)

    def input_info(self, shape, dtype) -> Info:
        return Info(shape, dtype, dtype)

    def feed_info(self, name: str, t) -> Info:
        dtype = t.dtype.name
        return Info(tuple(t.shape), dtype, dtype)

    def read(self, tensor) -> np.ndarray:
        with self.ctx.device:
            return tensor.get()

    def upload(self, data: np.ndarray, **how):
        data = np.ascontiguousarray(data)
        array = self.ctx.upload(data, wait=False, **how)  # (the plan waits: Plan.finish)
        if not self._snapshot_done:
            # The contents, for pickling the session without reading them back (until
            # `snapshot_done`; plans made later, for other shapes, keep none).
            self._hosts[id(array)] = (array, data, how)
        return array

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_hosts", None)
        host_copies.update(self._hosts)  # (for the device arrays pickled next: _array_name)
        return state

    def restored(self) -> None:
        # (a kernel without a plan keeps its first plan's constants: Session._keep_later)
        self._snapshot_done, self._hosts = bool(self.plans), {}
        super().restored()

    def snapshot_done(self, later: bool = False) -> None:
        for key in self._hosts:
            host_copies.pop(key, None)
        if later and not self.plans:
            return
        self._snapshot_done, self._hosts = True, {}

    def run_plan(self, plan: Plan, inputs, host: Collection[str]) -> tuple:
        """Run; the outputs named in `host` come back as NumPy arrays (through pinned memory)."""
        return plan.run(inputs, host, self.timing, self.use_graphs)

    def to_host(self, arr, stream) -> np.ndarray:
        """Copy a device array to a NumPy array in pinned memory (waits for the copy)."""
        out = empty_pinned(self.ctx.cp, arr.shape, arr.dtype)
        arr.get(stream=stream, out=out)
        return out

    def read_timing(self, pending: tuple) -> list[float]:
        events, labels = pending
        events[-1].synchronize()
        get = self.ctx.cp.cuda.get_elapsed_time
        return [get(events[2 * k], events[2 * k + 1]) * 1e-3 for k in range(len(labels))]

    def profile(self) -> dict[str, Any]:
        prof = super().profile()
        plans = list(self.plans.values())
        prof["init"]["graphs"] = sum(len(g) for p in plans for g in p.graphs.values())
        # Steps that started on a generic kernel, how many still run one, and when the last
        # plan switched to its own kernels (seconds after it was made; None: not yet).
        prof["init"]["generic_steps"] = sum(getattr(p, "generic_steps", 0) for p in plans)
        prof["init"]["generic_left"] = sum(
            getattr(p, "generic_failed", 0) + sum(1 for s in p.steps if getattr(s, "upgrade", None))
            for p in plans
        )
        done = [p.upgraded_at for p in plans if getattr(p, "upgraded_at", None) is not None]
        prof["init"]["upgraded_s"] = max(done) if done else None
        return prof
