"""Compiled partitions: a Plan per set of input shapes, replayed as a CUDA graph.

Making a plan: infer every shape from the inputs' concrete shapes (values that become known
constants, such as a Shape of a fixed input, are computed here once), fuse conv epilogues and
small-conv chains, choose each value's storage type, let each node's kernel builder emit its
launches, then give each intermediate a buffer by liveness (values whose lives do not overlap
share one).

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
import math
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinydl.backends.base import CompileOptions, Kernel, content_key
from tinydl.backends.cuda.context import Context
from tinydl.backends.cuda.kernels import CTYPES, REGISTRY, render
from tinydl.backends.fusion import fuse
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops.base import infer_graph

MAX_GRAPHS = 8
ALIGN = 256


@dataclass
class Info:
    """A value's concrete type in a plan: logical dtype and the dtype it is stored in."""

    shape: tuple[int, ...]
    dtype: str
    sdtype: str

    @property
    def ctype(self) -> str:
        return CTYPES[self.sdtype]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.sdtype).itemsize


@dataclass
class Launch:
    fn: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list  # value names (str), device arrays, or NumPy scalars
    smem: int
    label: str


class Build:
    """What a kernel builder sees of one node: types, constants, and ways to emit work."""

    def __init__(self, plan: Plan, node: Node):
        self.plan, self.node, self.ctx = plan, node, plan.ctx
        self.attrs = node.attrs
        self.inputs, self.outputs = node.inputs, node.outputs
        self.label = node.meta.get("label", node.op)

    @property
    def precision(self) -> str:
        return self.plan.precision

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and bool(self.inputs[i])

    def info(self, name_or_index) -> Info:
        name = self.inputs[name_or_index] if isinstance(name_or_index, int) else name_or_index
        info = self.plan.infos.get(name)
        if info is None:
            value = self.plan.const(name)
            if value is None:
                raise KeyError(f"{self.label}: no type for value '{name}'")
            info = Info(tuple(value.shape), value.dtype.name, value.dtype.name)
        return info

    def out(self, i: int = 0) -> Info:
        return self.plan.infos[self.outputs[i]]

    def const(self, i: int) -> np.ndarray | None:
        if not self.has(i):
            return None
        return self.plan.const(self.inputs[i])

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
        **params,
    ) -> None:
        """Render `template` with `params`, compile it (cached) and append a launch of its
        function `entry` on `grid` x `threads`; `args` are value names, uploaded constants or
        scalars."""
        label = label or self.label
        source = render(template, label=label, **params)
        fn = self.ctx.function(source, entry, label, smem)
        grid = tuple(int(g) for g in (grid if isinstance(grid, tuple | list) else (grid,)))
        threads = tuple(
            int(t) for t in (threads if isinstance(threads, tuple | list) else (threads,))
        )
        grid += (1,) * (3 - len(grid))
        threads += (1,) * (3 - len(threads))
        if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
            raise ValueError(f"{self.label}: grid {grid} exceeds the device's limits")
        args = [self._resolve(a) for a in args]
        self.plan.steps.append(Launch(fn, grid, threads, args, smem, label))

    def _resolve(self, arg):
        """A value name stays a name unless it is a constant: then its uploaded array."""
        if isinstance(arg, str) and arg not in self.plan.infos:
            value = self.plan.const(arg)
            if value is not None:
                return self.plan.owner.constant(("value", arg), value)
        return arg

    def upload(self, key, array: np.ndarray, dtype: str | None = None):
        """Upload a constant (packed weights, tables) once per compiled kernel."""
        array = np.ascontiguousarray(array if dtype is None else np.asarray(array).astype(dtype))
        return self.plan.owner.constant((self.node.name, key, array.dtype.name), array)

    def alias(self, out: str, src: str) -> None:
        """`out` is a view of `src` with another shape (zero-copy)."""
        self.plan.alias[out] = self.plan.alias.get(src, src)


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


class Plan:
    """One partition specialized to concrete input types."""

    def __init__(self, owner: CUDAKernel, inputs: dict[str, Info]):
        t0 = time.perf_counter()
        compile0 = owner.ctx.stats["compile_s"]
        self.owner, self.ctx, self.cp = owner, owner.ctx, owner.ctx.cp
        self.precision = owner.precision
        graph = owner.graph
        self.graph = graph
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        concrete = Graph(
            inputs=[Value(n, inputs[n].dtype, inputs[n].shape) for n in self.input_names],
            outputs=[Value(v.name) for v in graph.outputs],
            nodes=graph.nodes,
            initializers=graph.initializers,
        )
        known = infer_graph(concrete)
        types = concrete.values
        keep = set(self.output_names)
        # Values that are known constants once the input shapes are (Shape and what follows).
        self.consts: dict[str, np.ndarray] = {}
        live_nodes = []
        for node in graph.nodes:
            outs = [known[o] for o in node.outputs if o]
            if node.op == "Constant":
                from tinydl.ops import schema_of

                self.consts[node.outputs[0]] = np.asarray(schema_of("Constant").run(node, [])[0])
                continue
            if outs and all(t.value is not None for t in outs):
                for o in node.outputs:
                    if o:
                        self.consts[o] = np.asarray(known[o].value)
                continue
            live_nodes.append(node)
        body = Graph(list(graph.inputs), list(graph.outputs), live_nodes, graph.initializers)
        shape_of = lambda v: known[v].shape  # noqa: E731
        self.nodes = fuse(body, keep, shape_of, lambda n: n.op != "ConvTranspose")
        from tinydl.backends.cuda.kernels.conv import fuse_residuals

        self.nodes = fuse_residuals(self.nodes, keep, shape_of, graph)
        self.infos: dict[str, Info] = dict(inputs)
        self.alias: dict[str, str] = {}
        f16 = self.precision == "fp16"
        for node in self.nodes:
            for name in node.outputs:
                if not name:
                    continue
                t = types[name]
                if t.dtype not in CTYPES or t.shape is None:
                    raise ValueError(f"{node.name}: cannot place {name} ({t.dtype}, {t.shape})")
                if not all(isinstance(d, int) for d in t.shape):
                    raise ValueError(f"{node.name}: {name} has a symbolic shape {t.shape}")
                sd = "float16" if f16 and t.dtype == "float32" and name not in keep else t.dtype
                self.infos[name] = Info(tuple(t.shape), t.dtype, sd)
        for name, value in self.consts.items():
            self.infos[name] = Info(tuple(value.shape), value.dtype.name, value.dtype.name)
        from tinydl.backends.cuda.kernels.chain import fuse_chains

        self.nodes = fuse_chains(self, self.nodes, keep, types)
        self.steps: list[Launch] = []
        for node in self.nodes:
            REGISTRY[node.op].build(Build(self, node))
        self._allocate()
        self.graphs: collections.OrderedDict = collections.OrderedDict()
        self.ran = False
        self.init = {
            "plan_s": time.perf_counter() - t0,
            "compile_s": owner.ctx.stats["compile_s"] - compile0,
        }

    def const(self, name: str) -> np.ndarray | None:
        if name in self.consts:
            return self.consts[name]
        return self.graph.initializers.get(name)

    # -- buffers -------------------------------------------------------------------------------
    def root(self, name: str) -> str:
        return self.alias.get(name, name)

    def _allocate(self) -> None:
        cp = self.cp
        inputs, outputs = set(self.input_names), set(self.output_names)
        self.const_outputs = {}
        for o in outputs:
            r = self.root(o)
            if r in self.consts or (r in self.graph.initializers and r not in inputs):
                value = self.const(r)
                self.const_outputs[o] = self.owner.constant(("output", o), value)
        roots_out = {self.root(o) for o in outputs} - inputs - set(self.const_outputs)
        roots_out = {r for r in roots_out if r in self.infos and r not in self.consts}
        self.output_roots = sorted(roots_out)
        last: dict[str, int] = {}
        first: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for a in step.args:
                if isinstance(a, str):
                    r = self.root(a)
                    first.setdefault(r, i)
                    last[r] = i
        self.buffers: dict[str, Any] = {}
        free: list[tuple[int, Any]] = []
        ending: dict[int, list[str]] = {}
        for r, i in last.items():
            ending.setdefault(i, []).append(r)
        with self.ctx.device:
            for i, _ in enumerate(self.steps):
                for r, f in first.items():
                    if f != i or r in inputs or r in roots_out or r in self.buffers:
                        continue
                    need = max(1, self.infos[r].nbytes)
                    fit = [k for k, (size, _) in enumerate(free) if size >= need]
                    if fit:
                        k = min(fit, key=lambda k: free[k][0])
                        _, slot = free.pop(k)
                    else:
                        slot = cp.empty((need + ALIGN - 1) // ALIGN * ALIGN, cp.uint8)
                    self.buffers[r] = slot
                for r in ending.get(i, []):
                    if r in self.buffers:
                        free.append((self.buffers[r].size, self.buffers[r]))
        self.views = {r: self._view(slot, r) for r, slot in self.buffers.items()}
        self.out_specs = []
        for name in self.output_names:
            info = self.infos.get(name) or self.infos.get(self.root(name))
            shape = None if info is None else info.shape
            self.out_specs.append((name, self.const_outputs.get(name), self.root(name), shape))
        self.scratch_bytes = sum({id(s): s.size for s in self.buffers.values()}.values())

    def _view(self, slot, name: str):
        info = self.infos[name]
        return self.cp.ndarray(info.shape, info.sdtype, memptr=slot.data)

    def _new_outputs(self) -> dict[str, Any]:
        cp = self.cp
        return {r: cp.empty(self.infos[r].shape, self.infos[r].sdtype) for r in self.output_roots}

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
        self.pending = None
        with self.ctx.device:
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
                        self.pending = (events, ["total"])
                    return self._results(g.roots, feeds, host, stream)
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
                self.pending = (events, labels)
            self.ran = True
            return self._results(outs, feeds, host, stream)

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


class CUDAKernel(Kernel):
    """A partition compiled for CUDA; plans are made per input types (eagerly when static)."""

    def __init__(self, ctx: Context, graph: Graph, options: CompileOptions):
        self.ctx, self.graph = ctx, graph
        self.precision = options.precision
        self.extra = dict(options.extra)
        self.timing: str | None = self.extra.get("timing")
        self.use_graphs: bool = bool(self.extra.get("cuda_graphs", True))
        self.plans: dict[tuple, Plan] = {}
        self._by_feed: dict[tuple, Plan] = {}  # the same plans, by the feeds' (shape, dtype)
        self._constants: dict[tuple, Any] = {}
        self.init: dict[str, float] = {"weights_s": 0.0, "plan_s": 0.0, "compile_s": 0.0}
        self._pending: list[tuple] = []
        self._timings: list[tuple[str, float]] | None = None
        self.timing_history: collections.deque = collections.deque(maxlen=1000)
        self._staging: dict[tuple, tuple] = {}
        static = {}
        for v in graph.inputs:
            if v.shape is None or not all(isinstance(d, int) for d in v.shape):
                break
            if v.dtype not in CTYPES:
                break
            static[v.name] = Info(tuple(v.shape), v.dtype, v.dtype)
        else:
            self._plan(static)

    def constant(self, key, array: np.ndarray):
        key = (*key, content_key(array))
        arr = self._constants.get(key)
        if arr is None:
            t0 = time.perf_counter()
            with self.ctx.device:
                arr = self.ctx.cp.asarray(np.ascontiguousarray(array))
            self._constants[key] = arr
            self.init["weights_s"] += time.perf_counter() - t0
        return arr

    def _plan(self, infos: dict[str, Info]) -> Plan:
        key = tuple((n, i.shape, i.dtype) for n, i in sorted(infos.items()))
        plan = self.plans.get(key)
        if plan is None:
            w0 = self.init["weights_s"]
            plan = Plan(self, infos)
            self.plans[key] = plan
            self.init["plan_s"] += plan.init["plan_s"] - (self.init["weights_s"] - w0)
            self.init["compile_s"] += plan.init["compile_s"]
        return plan

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return self.run_host(inputs, ())

    def run_host(self, inputs: dict[str, Any], host: Collection[str]) -> dict[str, Any]:
        """Run; the outputs named in `host` come back as NumPy arrays (through pinned memory)."""
        key = tuple((name, t.shape, t.dtype) for name, t in inputs.items())
        plan = self._by_feed.get(key)
        if plan is None:
            infos = {}
            for name, t in inputs.items():
                dtype = t.dtype.name
                infos[name] = Info(tuple(t.shape), dtype, dtype)
            plan = self._by_feed[key] = self._plan(infos)
        first = "first_run_s" not in self.init
        t0 = time.perf_counter()
        out = plan.run(inputs, host, self.timing, self.use_graphs)
        if first:
            if not host:
                self.ctx.sync()
            self.init["first_run_s"] = time.perf_counter() - t0
        if plan.pending is not None:
            self._pending.append(plan.pending)
        return out

    def to_host(self, arr, stream) -> np.ndarray:
        """Copy a device array to a NumPy array in pinned memory (waits for the copy)."""
        import cupyx

        out = cupyx.empty_pinned(arr.shape, arr.dtype)
        arr.get(stream=stream, out=out)
        return out

    @property
    def timings(self) -> list[tuple[str, float]] | None:
        """(op label, GPU seconds) of the last timed run; waits for runs still in flight."""
        cp = self.ctx.cp
        while self._pending:
            events, labels = self._pending.pop(0)
            events[-1].synchronize()
            secs = [
                cp.cuda.get_elapsed_time(events[2 * k], events[2 * k + 1]) * 1e-3
                for k in range(len(labels))
            ]
            self._timings = list(zip(labels, secs, strict=True))
            self.timing_history.append(self._timings)
        return self._timings

    def profile(self) -> dict[str, Any]:
        init = dict(self.init)
        init["graphs"] = sum(len(g) for p in self.plans.values() for g in p.graphs.values())
        return {"init": init, "ops": self.timings}
