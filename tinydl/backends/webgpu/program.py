"""Compiled partitions: a Plan per set of input shapes, run with one encoder and one submit.

Making a plan: infer every shape from the inputs' concrete shapes, fuse conv chains, choose each
value's layout and storage type, let each node's kernel builder emit its dispatches, then give
each intermediate a buffer by liveness (values whose lives do not overlap share one). Buffers,
pipelines and bind groups are made once and reused by every run with those shapes.
"""

from __future__ import annotations

import collections
import functools
import math
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.backends.base import CompileOptions, Kernel, content_key
from tinydl.backends.fusion import fuse, fuse_elementwise
from tinydl.backends.webgpu.context import Context
from tinydl.backends.webgpu.kernels import REGISTRY, render
from tinydl.backends.webgpu.kernels.conv import direct_ok
from tinydl.backends.webgpu.tensor import (
    LOGICAL,
    STORAGE_TYPES,
    GPUTensor,
    Storage,
    from_storage,
    padded_shape,
    to_storage,
)
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops.base import infer_graph

ELEMENTWISE_ENV = "TINYDL_WEBGPU_ELEMENTWISE"


@functools.cache
def _header(f16: bool) -> str:
    """What every kernel starts with: the f16 extension when the device has it, and helpers."""
    return ("enable f16;\n" if f16 else "") + render("common.wgsl")


@dataclass
class Info:
    """A value's concrete type in a plan."""

    shape: tuple[int, ...]
    dtype: str
    stype: str
    layout: str = "nchw"

    @property
    def nbytes(self) -> int:
        return math.prod(padded_shape(self.shape, self.layout)) * STORAGE_TYPES[self.stype].itemsize


@dataclass
class Dispatch:
    pipeline: Any
    bindings: list  # value names (str) or Storage
    grid: tuple[int, int, int]
    label: str
    bind_groups: dict = field(default_factory=dict)


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
        return self.plan.infos[name]

    def out(self, i: int = 0) -> Info:
        return self.plan.infos[self.outputs[i]]

    def const(self, i: int) -> np.ndarray | None:
        if not self.has(i):
            return None
        return self.plan.graph.initializers.get(self.inputs[i])

    def dispatch(self, template: str, bindings: list, grid, label: str = "", **params) -> None:
        label = label or self.label
        source = render(template, header=_header(self.ctx.has_f16), label=label, **params)
        pipeline = self.ctx.pipeline(source, label)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        limit = int(self.ctx.limits.get("max-compute-workgroups-per-dimension", 65535))
        if max(grid) > limit:
            raise ValueError(f"{self.label}: grid {grid} exceeds {limit} workgroups per dimension")
        self.plan.steps.append(Dispatch(pipeline, list(bindings), grid, label))

    def upload(self, key, array: np.ndarray, stype: str, uniform: bool = False) -> Storage:
        """Upload a constant (packed weights, tables) once per compiled kernel; `uniform` puts
        it in a uniform buffer (constant memory) instead of a storage buffer."""
        return self.plan.owner.constant(
            (self.node.name, key, stype, uniform), array, stype, uniform
        )

    def alias(self, out: str, src: str) -> None:
        """`out` is a view of `src` with another shape (zero-copy)."""
        self.plan.alias[out] = self.plan.alias.get(src, src)


class Plan:
    """One partition specialized to concrete input types."""

    def __init__(self, owner: WebGPUKernel, inputs: dict[str, Info]):
        t0 = time.perf_counter()
        compile0 = owner.ctx.stats["compile_s"]
        self.owner, self.ctx, self.precision = owner, owner.ctx, owner.precision
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
        infer_graph(concrete)
        types = concrete.values
        keep = set(self.output_names)
        self.nodes = fuse(graph, keep, lambda v: types[v].shape, direct_ok)
        # TINYDL_WEBGPU_ELEMENTWISE=off (or extra["fuse_elementwise"] = False): one dispatch
        # per elementwise op, for comparisons.
        fuse_runs = owner.extra.get("fuse_elementwise", os.environ.get(ELEMENTWISE_ENV) != "off")
        if fuse_runs:
            self.nodes = fuse_elementwise(self.nodes, keep, graph, types)
        self.infos: dict[str, Info] = dict(inputs)
        self.alias: dict[str, str] = {}
        f16 = self.precision == "fp16" and self.ctx.has_f16
        for node in self.nodes:
            for name in node.outputs:
                if not name:
                    continue
                t = types[name]
                if (
                    t.dtype not in LOGICAL
                    or t.shape is None
                    or not all(isinstance(d, int) for d in t.shape)
                ):
                    raise ValueError(f"{node.name}: cannot place {name} ({t.dtype}, {t.shape})")
                stype = (
                    "f16" if f16 and t.dtype == "float32" and name not in keep else LOGICAL[t.dtype]
                )
                self.infos[name] = Info(tuple(t.shape), t.dtype, stype)
        self._choose_layouts(keep)
        self.steps: list[Dispatch] = []
        for node in self.nodes:
            REGISTRY[node.op].build(Build(self, node))
        self._allocate()
        self.init = {
            "plan_s": time.perf_counter() - t0,
            "compile_s": owner.ctx.stats["compile_s"] - compile0,
        }

    # -- layouts -------------------------------------------------------------------------------
    def _choose_layouts(self, keep: set[str]) -> None:
        """nc4hw4 (packed-4) for a value made and used only by kernels that take it (direct
        convs): neighbouring pixels' vec4 of channels are neighbours in memory, so a tile's
        loads and stores are contiguous (ESPCN's first layer: 0.11 -> 0.055 ms on an H200
        against N,H,W,C4 channel-last vec4)."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for i, name in enumerate(node.inputs):
                if name:
                    users.setdefault(name, []).append((node, i))
        for node in self.nodes:
            kd = REGISTRY[node.op]
            if kd.packed4 is None or not kd.packed4(node, self) or "d2s" in node.meta:
                continue
            name = node.outputs[0]
            readers = users.get(name, [])
            if name in keep or not readers:
                continue
            if all(
                i == 0 and REGISTRY[u.op].packed4 is not None and REGISTRY[u.op].packed4(u, self)
                for u, i in readers
            ):
                self.infos[name].layout = "nc4hw4"

    # -- buffers -------------------------------------------------------------------------------
    def root(self, name: str) -> str:
        return self.alias.get(name, name)

    def _allocate(self) -> None:
        inputs, outputs = set(self.input_names), set(self.output_names)
        roots_out = {self.root(o) for o in outputs} - inputs
        self.output_roots = sorted(roots_out)
        last: dict[str, int] = {}
        first: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for b in step.bindings:
                if isinstance(b, str):
                    r = self.root(b)
                    first.setdefault(r, i)
                    last[r] = i
        self.storage: dict[str, Storage] = {}
        free: list[tuple[int, Any]] = []
        ending: dict[int, list[str]] = {}
        for r, i in last.items():
            ending.setdefault(i, []).append(r)
        for i, _ in enumerate(self.steps):
            for r, f in first.items():
                if f != i or r in inputs or r in roots_out or r in self.storage:
                    continue
                need = self.infos[r].nbytes
                self.ctx.check_size(need, f"value '{r}' {self.infos[r].shape}")
                fit = [k for k, (size, _) in enumerate(free) if size >= need]
                if fit:
                    k = min(fit, key=lambda k: free[k][0])
                    _, st = free.pop(k)
                else:
                    size = max(256, (need + 255) // 256 * 256)
                    st = Storage(self.ctx, self.ctx.create_buffer(size), pooled=False)
                self.storage[r] = st
            for r in ending.get(i, []):
                if r in self.storage:
                    free.append((self.storage[r].buffer.size, self.storage[r]))
        for r in roots_out:
            self.ctx.check_size(self.infos[r].nbytes, f"output '{r}' {self.infos[r].shape}")

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: dict[str, GPUTensor], host: Collection[str], timing: str | None):
        ctx = self.ctx
        env: dict[str, Storage] = dict(self.storage)
        for name in self.input_names:
            env[name] = feeds[name].storage
        for r in self.output_roots:
            env[r] = Storage(ctx, ctx.acquire(self.infos[r].nbytes))
        with ctx.guard("running a model"):
            encoder = ctx.device.create_command_encoder()
            queries = None
            if timing and ctx.has_timestamps:
                count = 2 * (len(self.steps) if timing == "ops" else 1)
                queries = ctx.device.create_query_set(type="timestamp", count=max(count, 2))
            if queries is not None and timing == "ops":
                for k, step in enumerate(self.steps):
                    cp = encoder.begin_compute_pass(
                        timestamp_writes={
                            "query_set": queries,
                            "beginning_of_pass_write_index": 2 * k,
                            "end_of_pass_write_index": 2 * k + 1,
                        }
                    )
                    self._record(cp, step, env)
                    cp.end()
            else:
                tw = None
                if queries is not None:
                    tw = {
                        "query_set": queries,
                        "beginning_of_pass_write_index": 0,
                        "end_of_pass_write_index": 1,
                    }
                cp = encoder.begin_compute_pass(timestamp_writes=tw)
                for step in self.steps:
                    self._record(cp, step, env)
                cp.end()
            staging = {}
            u = ctx.wgpu.BufferUsage
            if host:
                # The compute goes first, on its own; the read-back copies follow in a second
                # submission. On an H200 (Vulkan) the 8.3 MB output of ESPCN x3 then comes
                # back 0.2 ms sooner than when the copy ends the compute's command buffer
                # (two command buffers in one submission do not help).
                ctx.queue.submit([encoder.finish()])
                encoder = ctx.device.create_command_encoder()
            for name in host:
                info = self.infos[name]
                buf = ctx.acquire(info.nbytes, u.MAP_READ | u.COPY_DST)
                encoder.copy_buffer_to_buffer(
                    env[self.root(name)].buffer, 0, buf, 0, (info.nbytes + 3) // 4 * 4
                )
                staging[name] = buf
            if queries is not None:
                n = queries.count
                resolved = ctx.device.create_buffer(size=8 * n, usage=u.QUERY_RESOLVE | u.COPY_SRC)
                encoder.resolve_query_set(queries, 0, n, resolved, 0)
                ts_buf = ctx.acquire(8 * n, u.MAP_READ | u.COPY_DST)
                encoder.copy_buffer_to_buffer(resolved, 0, ts_buf, 0, 8 * n)
            ctx.queue.submit([encoder.finish()])
        results: dict[str, Any] = {}
        for name in self.output_names:
            info = self.infos[name]
            t = GPUTensor(env[self.root(name)], info.shape, info.dtype, info.stype, info.layout)
            if name in staging:
                results[name] = from_storage(ctx.map_read(staging[name], info.nbytes), t)
            else:
                results[name] = t
        # Timestamps are read later (WebGPUKernel.timings), so timing does not add a wait.
        self.pending = None
        if queries is not None:
            labels = [s.label for s in self.steps] if timing == "ops" else ["total"]
            self.pending = (ts_buf, 8 * queries.count, labels)
        return results

    def _record(self, cp, step: Dispatch, env: dict[str, Storage]) -> None:
        stores = [env[self.root(b)] if isinstance(b, str) else b for b in step.bindings]
        key = tuple(s.serial for s in stores)
        bind_group = step.bind_groups.get(key)
        if bind_group is None:
            if len(step.bind_groups) > 16:
                step.bind_groups.clear()
            bind_group = self.ctx.device.create_bind_group(
                layout=step.pipeline.get_bind_group_layout(0),
                entries=[
                    {"binding": i, "resource": {"buffer": s.buffer}} for i, s in enumerate(stores)
                ],
            )
            step.bind_groups[key] = bind_group
        cp.set_pipeline(step.pipeline)
        cp.set_bind_group(0, bind_group)
        cp.dispatch_workgroups(*step.grid)


class WebGPUKernel(Kernel):
    """A partition compiled for WebGPU; plans are made per input types (eagerly when static)."""

    def __init__(self, ctx: Context, graph: Graph, options: CompileOptions):
        self.ctx, self.graph = ctx, graph
        self.precision = options.precision
        self.extra = dict(options.extra)
        self.timing: str | None = self.extra.get("timing")
        self.plans: dict[tuple, Plan] = {}
        self._constants: dict[tuple, Storage] = {}
        self.init: dict[str, float] = {"weights_s": 0.0, "plan_s": 0.0, "compile_s": 0.0}
        self._pending: list[tuple] = []
        self._timings: list[tuple[str, float]] | None = None
        # Per-op (or total) GPU seconds of recent timed runs, oldest first.
        self.timing_history: collections.deque = collections.deque(maxlen=1000)
        static = {}
        for v in graph.inputs:
            if v.shape is None or not all(isinstance(d, int) for d in v.shape):
                break
            if v.dtype not in LOGICAL:
                break
            static[v.name] = Info(tuple(v.shape), v.dtype, LOGICAL[v.dtype])
        else:
            self._plan(static)

    def constant(self, key, array: np.ndarray, stype: str, uniform: bool = False) -> Storage:
        t0 = time.perf_counter()
        data = to_storage(array, stype)
        key = (*key, content_key(data))
        st = self._constants.get(key)
        if st is None:
            u = self.ctx.wgpu.BufferUsage
            usage = u.UNIFORM | u.COPY_DST if uniform else self.ctx.storage_usage
            st = Storage(self.ctx, self.ctx.upload(data, usage), pooled=False)
            self._constants[key] = st
            self.init["weights_s"] += time.perf_counter() - t0
        return st

    def _plan(self, infos: dict[str, Info]) -> Plan:
        key = tuple((n, i.shape, i.dtype, i.stype, i.layout) for n, i in sorted(infos.items()))
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
        """Run; the outputs named in `host` come back as NumPy arrays read in the same submit."""
        infos = {}
        for name, t in inputs.items():
            if t.layout != "nchw":
                raise ValueError(f"input '{name}' must have the nchw layout, got {t.layout}")
            infos[name] = Info(t.shape, t.dtype.name, t.stype)
        plan = self._plan(infos)
        first = "first_run_s" not in self.init
        t0 = time.perf_counter()
        out = plan.run(inputs, host, self.timing)
        if first:
            if not host:
                self.ctx.sync()
            self.init["first_run_s"] = time.perf_counter() - t0
        if plan.pending is not None:
            self._pending.append(plan.pending)
        return out

    @property
    def timings(self) -> list[tuple[str, float]] | None:
        """(op label, GPU seconds) of the last timed run; waits for runs still in flight."""
        while self._pending:
            buf, nbytes, labels = self._pending.pop(0)
            ticks = self.ctx.map_read(buf, nbytes).view(np.uint64).astype(np.int64)
            seconds = (ticks[1::2] - ticks[0::2]) * 1e-9
            self._timings = [(n, float(s)) for n, s in zip(labels, seconds, strict=True)]
            self.timing_history.append(self._timings)
        return self._timings

    def profile(self) -> dict[str, Any]:
        return {"init": dict(self.init), "ops": self.timings}
