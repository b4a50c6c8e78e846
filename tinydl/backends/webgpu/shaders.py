"""shaders="auto": each node drawn or dispatched, whichever measured faster on this adapter.

When a plan is made, the partition is planned twice more, all compute and all fragment, and each
runs a few times on random inputs with a GPU timestamp around every step. A node's time is the
sum of its steps. Then, in plan order, each node the render path takes is drawn when its
fragment time plus the transitions that choice adds (a buffer input drawn into a texture, a
texture input copied into a buffer; their cost per byte measured from the fragment plan's own
transitions) is below its compute time plus the transitions that choice adds. The mixed plan
this gives is then run whole beside the two pure plans, and the fastest by the wall clock wins
(per-step sums miss the fixed cost of each render pass: on an H100 a mixed plan predicted 2%
faster than compute ran twice as slow).

Decisions are cached on disk, $TINYDL_CACHE_DIR/webgpu/shaders.json (default
~/.cache/tinydl), keyed by the adapter, the partition's nodes and the input types, so a later
process makes its plan without measuring. Without timestamp queries the two pure plans are timed
by the wall clock and the faster one is used whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.cache import cache_dir

RUNS = 5
_LOCK = threading.Lock()


def cache_path() -> Path:
    return cache_dir("webgpu", "shaders.json")


def _key(plan_cls, owner, inputs) -> str:
    parts = [
        owner.ctx.name,
        owner.precision,
        repr(sorted(owner.extra.get(k) or "" for k in ("weights",))),
        repr(sorted((n, i.shape, i.dtype, i.stype) for n, i in inputs.items())),
    ]
    for node in owner.graph.nodes:
        parts.append(
            repr((node.op, node.name, node.inputs, node.outputs, sorted(node.attrs.items())))
        )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _load() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _store(key: str, entry: dict) -> None:
    with _LOCK:
        data = _load()
        data[key] = entry
        path = cache_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
            tmp.replace(path)
        except OSError:
            pass  # a read-only home: measured again next time


def _feeds(plan) -> dict[str, Any]:
    """Random inputs of the plan's types, uploaded (never zeros: a conv of zeros may run
    faster on some GPUs)."""
    from tinydl.backends.webgpu import WebGPUBackend

    rng = np.random.default_rng(0)
    backend = WebGPUBackend(plan.ctx.index)
    feeds = {}
    for name in plan.input_names:
        info = plan.infos[name]
        if info.dtype == "uint8":
            a = rng.integers(0, 256, info.shape, dtype=np.uint8)
        elif info.dtype in ("float32", "float16"):
            a = rng.standard_normal(info.shape).astype(info.dtype)
        else:
            a = np.zeros(info.shape, info.dtype)
        feeds[name] = backend.to_device(a)
    return feeds


def _per_step(plan, feeds, timed: bool) -> tuple[list[float], float]:
    """Median seconds of each step (GPU timestamps), and the median wall time of a run."""
    times, walls = [], []
    for _ in range(RUNS + 1):
        t0 = time.perf_counter()
        _, pending = plan.run(feeds, (), "ops" if timed else None)
        plan.ctx.sync()
        walls.append(time.perf_counter() - t0)
        if pending is not None:
            times.append(plan.owner.read_timing(pending))
    step_times = list(np.median(np.array(times[1:]), axis=0)) if times else []
    return step_times, float(np.median(walls[1:]))


def choose(plan_cls, owner, inputs) -> dict[str, Any]:
    """{"choice": {node: "fragment" | "compute"}, "nodes": {node: [compute s, fragment s]},
    "mode": "mixed" | "compute" | "fragment", "predicted_s": per-step sums of each plan,
    "measured_s": wall seconds of each plan run whole}: measured, or cached."""
    key = _key(plan_cls, owner, inputs)
    cached = _load().get(key)
    if cached is not None:
        return cached
    compute = plan_cls(owner, inputs, shaders="compute")
    fragment = plan_cls(owner, inputs, shaders="fragment")
    feeds = _feeds(compute)
    timed = bool(owner.ctx.has_timestamps)
    tc, wall_c = _per_step(compute, feeds, timed)
    tf, wall_f = _per_step(fragment, feeds, timed)
    entry: dict[str, Any] = {"choice": {}, "nodes": {}}
    if not timed:
        mode = "fragment" if wall_f < wall_c else "compute"
        entry.update(mode=mode, measured_s={"compute": wall_c, "fragment": wall_f})
        if mode == "fragment":
            entry["choice"] = {n.name: "fragment" for n in fragment.nodes}
        _store(key, entry)
        return entry
    by_node_c: dict[str, float] = {}
    for step, t in zip(compute.steps, tc, strict=True):
        by_node_c[step.node] = by_node_c.get(step.node, 0.0) + t
    by_node_f: dict[str, float] = {}
    to_rate, from_rate = [], []
    for step, t in zip(fragment.steps, tf, strict=True):
        by_node_f[step.node] = by_node_f.get(step.node, 0.0) + t
        label = step.label
        if label.startswith(("to texture (nchw)", "from texture (nchw)")):
            name = label.split(") ", 1)[1]
            nbytes = max(1, compute.nbytes(compute.infos[name]) if name in compute.infos else 1)
            (to_rate if label.startswith("to") else from_rate).append(t / nbytes)
    per_byte_to = float(np.median(to_rate)) if to_rate else 0.0
    per_byte_from = float(np.median(from_rate)) if from_rate else 0.0
    drawable = {n.name for n in fragment.nodes if n.meta.get("shader") == "fragment"}
    held: dict[str, str] = {}  # value -> "tex" | "buf" as produced
    crossed: set[tuple[str, str]] = set()
    total = 0.0
    for node in compute.nodes:
        c = by_node_c.get(node.name, 0.0)
        if node.name not in drawable or node.name not in by_node_f:
            cost = c + _crossing(node, held, crossed, "buf", compute, per_byte_from, True)
            total += cost
            for o in node.outputs:
                held[o] = "buf"
            continue
        f = by_node_f[node.name]
        entry["nodes"][node.name] = [c, f]  # the nodes auto decides, each with its two times
        cf = f + _crossing(node, held, crossed, "tex", compute, per_byte_to, False)
        cc = c + _crossing(node, held, crossed, "buf", compute, per_byte_from, False)
        side = "tex" if cf < cc else "buf"
        total += _crossing(
            node,
            held,
            crossed,
            side,
            compute,
            per_byte_to if side == "tex" else per_byte_from,
            True,
        )
        total += f if side == "tex" else c
        entry["choice"][node.name] = "fragment" if side == "tex" else "compute"
        for o in node.outputs:
            held[o] = side
    total_c, total_f = sum(tc), sum(tf)
    entry["predicted_s"] = {"mixed": total, "compute": total_c, "fragment": total_f}
    # The prediction sums per-step times, each step timed in a pass of its own; the choice is
    # settled by running the plans whole (a render pass has a fixed cost a sum misses).
    measured = {"compute": wall_c, "fragment": wall_f}
    if any(c == "fragment" for c in entry["choice"].values()):
        mixed = plan_cls(owner, inputs, shaders="fragment", choice=entry["choice"])
        measured["mixed"] = _per_step(mixed, feeds, False)[1]
    entry["measured_s"] = measured
    entry["mode"] = min(measured, key=measured.get)
    if entry["mode"] != "mixed":
        pure = "fragment" if entry["mode"] == "fragment" else "compute"
        entry["choice"] = {n: pure for n in entry["choice"]}
    _store(key, entry)
    return entry


def _crossing(node, held, crossed, side, plan, per_byte, commit) -> float:
    """The cost of the transitions node's inputs need for it to run on `side`."""
    cost = 0.0
    for name in node.inputs:
        if not name or name not in held or held[name] == side or (name, side) in crossed:
            continue
        info = plan.infos.get(name)
        cost += per_byte * (plan.nbytes(info) if info is not None else 0)
        if commit:
            crossed.add((name, side))
    return cost
