"""WebGPU plans (backends/planned.py makes them): one encoder and one submit per run.

What is WebGPU's own: storage types and the packed-4 layout of values between direct
convolutions, buffers as Storage, dispatches recorded into one compute pass (per-op timestamp
passes when profiling), and host outputs read back in a submission right after the compute.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.backends import planned
from tinydl.backends.fusion import fuse, fuse_attention, fuse_elementwise
from tinydl.backends.planned import Info
from tinydl.backends.webgpu.kernels import REGISTRY, render
from tinydl.backends.webgpu.kernels.attention import MAX_DIM
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


@functools.cache
def _header(f16: bool) -> str:
    """What every kernel starts with: the f16 extension when the device has it, and helpers."""
    return ("enable f16;\n" if f16 else "") + render("common.wgsl")


@dataclass
class Dispatch:
    pipeline: Any
    args: list  # value names (str) or Storage
    grid: tuple[int, int, int]
    label: str
    bind_groups: dict = field(default_factory=dict)


class Build(planned.Build):
    def dispatch(self, template: str, bindings: list, grid, label: str = "", **params) -> None:
        label = label or self.label
        source = render(template, header=_header(self.ctx.has_f16), label=label, **params)
        pipeline = self.ctx.pipeline(source, label)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        limit = int(self.ctx.limits.get("max-compute-workgroups-per-dimension", 65535))
        if max(grid) > limit:
            raise ValueError(f"{self.label}: grid {grid} exceeds {limit} workgroups per dimension")
        self.plan.steps.append(
            Dispatch(pipeline, [self._resolve(a) for a in bindings], grid, label)
        )

    def _resolve(self, arg):
        """A value name stays a name unless it is a constant (a weight, or a value the plan
        computed from shapes): then its uploaded storage."""
        if isinstance(arg, str) and arg not in self.plan.input_names:
            value = self.plan.const(arg)
            if value is not None:
                stype = self.plan.const_info(value).stype
                return self.plan.owner.constant(("value", arg, stype), to_storage(value, stype))
        return arg

    def upload(self, key, array: np.ndarray, stype: str, uniform: bool = False) -> Storage:
        """Upload a constant (packed weights, tables) once per compiled kernel; `uniform` puts
        it in a uniform buffer (constant memory) instead of a storage buffer."""
        return self.plan.owner.constant(
            (self.node.name, key, stype, uniform), to_storage(array, stype), uniform=uniform
        )


class Plan(planned.Plan):
    build_class = Build
    registry = REGISTRY

    def rewrite(self, body, keep, shape_of, types):
        nodes = fuse(
            body, keep, shape_of, lambda n: direct_ok(n, body.initializers.get(n.inputs[1]))
        )
        # Before the elementwise runs, which would take the scores' scale and mask.
        nodes = fuse_attention(nodes, keep, shape_of, types, self.const, MAX_DIM)
        # extra["fuse_elementwise"] = False (TINYDL_WEBGPU_ELEMENTWISE=off): one dispatch per
        # elementwise op, for comparisons.
        if self.owner.extra.get("fuse_elementwise", True):
            nodes = fuse_elementwise(nodes, keep, body, types)
        return nodes

    @classmethod
    def holds(cls, dtype: str) -> bool:
        return dtype in LOGICAL

    def value_info(self, shape, dtype, is_output) -> Info:
        f16 = self.precision == "fp16" and self.ctx.has_f16
        return Info(
            shape, dtype, "f16" if f16 and dtype == "float32" and not is_output else LOGICAL[dtype]
        )

    def const_info(self, value) -> Info:
        return Info(tuple(value.shape), value.dtype.name, LOGICAL[value.dtype.name])

    def nbytes(self, info: Info) -> int:
        return math.prod(padded_shape(info.shape, info.layout)) * STORAGE_TYPES[info.stype].itemsize

    def _allocate(self) -> None:
        # Every value must fit one storage binding (a tensor over the limit is refused, named).
        for step in self.steps:
            for a in step.args:
                if isinstance(a, str) and self.root(a) not in self.input_names:
                    info = self.infos[self.root(a)]
                    self.ctx.check_size(self.nbytes(info), f"value '{self.root(a)}' {info.shape}")
        super()._allocate()

    def new_buffer(self, nbytes: int) -> Storage:
        return Storage(
            self.ctx, self.ctx.create_buffer(max(256, (nbytes + 255) // 256 * 256)), pooled=False
        )

    def buffer_size(self, buffer: Storage) -> int:
        return buffer.buffer.size

    # -- layouts -------------------------------------------------------------------------------
    def arrange(self, keep, types) -> None:
        """nc4hw4 (packed-4) for a value made and used only by kernels that take it (direct
        convs): neighbouring pixels' vec4 of channels are neighbours in memory, so a tile's
        loads and stores are contiguous (ESPCN's first layer: 0.11 -> 0.055 ms on an H200
        against N,H,W,C4 channel-last vec4)."""
        users: dict[str, list[tuple]] = {}
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

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: dict[str, GPUTensor], host: Collection[str], timing: str | None):
        ctx = self.ctx
        env: dict[str, Storage] = dict(self.buffers)
        for name in self.input_names:
            env[name] = feeds[name].storage
        for r in self.output_roots:
            env[r] = Storage(ctx, ctx.acquire(self.nbytes(self.infos[r])))
        # One thread at a time records and submits (threads sharing a session, or sessions
        # sharing the device); waiting for read-backs happens outside the lock.
        with ctx.queue_lock:
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
                    if name in self.const_outputs:
                        continue  # known when planning: returned from the host copy below
                    info = self.infos[name]
                    nbytes = self.nbytes(info)
                    buf = ctx.acquire(nbytes, u.MAP_READ | u.COPY_DST)
                    encoder.copy_buffer_to_buffer(
                        env[self.root(name)].buffer, 0, buf, 0, (nbytes + 3) // 4 * 4
                    )
                    staging[name] = buf
                if queries is not None:
                    n = queries.count
                    resolved = ctx.device.create_buffer(
                        size=8 * n, usage=u.QUERY_RESOLVE | u.COPY_SRC
                    )
                    encoder.resolve_query_set(queries, 0, n, resolved, 0)
                    ts_buf = ctx.acquire(8 * n, u.MAP_READ | u.COPY_DST)
                    encoder.copy_buffer_to_buffer(resolved, 0, ts_buf, 0, 8 * n)
                ctx.queue.submit([encoder.finish()])
        results: dict[str, Any] = {}
        for name in self.output_names:
            if name in self.const_outputs:
                value = np.asarray(self.const(self.root(name)))
                if name in host:
                    results[name] = value.copy()
                else:
                    info = self.const_info(value)
                    results[name] = GPUTensor(
                        self.const_outputs[name], info.shape, info.dtype, info.stype
                    )
                continue
            info = self.infos[name]
            t = GPUTensor(env[self.root(name)], info.shape, info.dtype, info.stype, info.layout)
            if name in staging:
                results[name] = from_storage(ctx.map_read(staging[name], self.nbytes(info)), t)
            else:
                results[name] = t
        # Timestamps are read later (WebGPUKernel.timings), so timing does not add a wait.
        pending = None
        if queries is not None:
            labels = [s.label for s in self.steps] if timing == "ops" else ["total"]
            pending = (ts_buf, 8 * queries.count, labels)
        return results, pending

    def _record(self, cp, step: Dispatch, env: dict[str, Storage]) -> None:
        stores = [env[self.root(b)] if isinstance(b, str) else b for b in step.args]
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


class WebGPUKernel(planned.PlannedKernel):
    """A partition compiled for WebGPU."""

    plan_class = Plan

    def input_info(self, shape, dtype) -> Info:
        return Info(shape, dtype, LOGICAL[dtype])

    def feed_info(self, name: str, t: GPUTensor) -> Info:
        if t.layout != "nchw":
            raise ValueError(f"input '{name}' must have the nchw layout, got {t.layout}")
        return Info(t.shape, t.dtype.name, t.stype)

    def upload(self, data: np.ndarray, uniform: bool = False) -> Storage:
        stype = LOGICAL.get(data.dtype.name)
        if stype is not None and STORAGE_TYPES[stype] != data.dtype:
            data = to_storage(data, stype)  # a constant output of int64 or bool: held as i32
        u = self.ctx.wgpu.BufferUsage
        usage = u.UNIFORM | u.COPY_DST if uniform else self.ctx.storage_usage
        return Storage(self.ctx, self.ctx.upload(data, usage), pooled=False)

    def run_plan(self, plan: Plan, inputs, host: Collection[str]) -> tuple:
        """Run; the outputs named in `host` come back as NumPy arrays read in the same submit."""
        return plan.run(inputs, host, self.timing)

    def read_timing(self, pending: tuple) -> list[float]:
        buf, nbytes, _ = pending
        ticks = self.ctx.map_read(buf, nbytes).view(np.uint64).astype(np.int64)
        return list((ticks[1::2] - ticks[0::2]) * 1e-9)
