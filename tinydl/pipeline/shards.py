"""Shards: one app run as k copies in k processes, each with its share of every component's
instances, so that its frames and streams are split over k interpreters (and GIL locks).

One process moves a few thousand frames a second through its queues, ledger and components
(measured on a 16-core host: a stand-in app with 300 sources at 30 fps, about 7,900 frames/s),
however many GPUs it drives: two GPUs driven from one process ran no faster than one. An app
whose streams are independent — sources, per-stream work, a batched GPU stage, sinks — scales
past that when it is sharded:

    report = app.run(shards=2)       # or a deployment plan's `shards`

Shard i gets the instances i, i + k, i + 2k, … of every component, and at least one: a
component with fewer instances than shards is copied (each shard its own Batch, its own sink).
An instance keeps its index, its flow ids and its placement from the whole app, so with
`gpus=["cuda:0", "cuda:1"]` and two instances each shard drives its own GPU. Each shard is a
process started with "spawn" (the app and its components must pickle, as for the process
executor) that runs its part with `App.run` and sends back its report and the components that
live in the app (`executors == ("thread",)`: Collect, Metrics, sinks that keep what they saw).

The reports are merged — frames in, out, dropped and errored summed (every frame is accounted
for in exactly one shard), the per-component rows named `name@shard`, the errors concatenated —
and `report.shards` keeps each shard's own; `report.parts[name]` holds the shards' copies of the
components sent back, in shard order. What crosses shards is not possible: an edge to one named
instance, a component whose instances share state (a `Collect` fed by all streams sees only its
shard's), a trace file.
"""

from __future__ import annotations

import dataclasses
import io
import multiprocessing as mp
import pickle
import threading
import time
import traceback
from collections import Counter
from typing import TYPE_CHECKING, Any

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError, check_count
from tinydl.pipeline.profiler import RunReport

if TYPE_CHECKING:
    from tinydl.pipeline.app import App

START_TIMEOUT_S = 120.0  # spawn, imports and unpickling the app, before its own timeout counts


def shard(app: App, i: int, k: int) -> App:
    """Shard i of k: a copy of the app with instances i, i + k, … of each component (at least
    one). The app itself is not changed."""
    import copy

    part = copy.copy(app)
    part.components = {}
    for name, spec in app.components.items():
        if spec.shard_of is not None:
            raise PipelineError(f"{app.name}: a shard cannot be sharded again")
        mine = list(range(i, spec.instances, k)) or [i % spec.instances]
        part.components[name] = dataclasses.replace(
            spec, instances=len(mine), shard_of=(mine, spec.instances)
        )
    # A collect edge restores the order of several instances' outputs; from one it is plain.
    part.edges = [
        dataclasses.replace(e, collect=False, form="one-to-one")
        if e.collect and part.components[e.src].instances == 1
        else e
        for e in app.edges
    ]
    return part


def check(app: App, k: int) -> bytes:
    """What the shards get (the app, pickled), or the PipelineError saying why it cannot be
    sharded."""
    check_count("shards", k)
    specs = app.components.values() if k > 1 else ()
    whole = [
        f"{s.name} ({type(s.component).__name__})" for s in specs if s.component.sees_all_flows
    ]
    if whole:
        raise PipelineError(
            f"{app.name}: {', '.join(whole)} counts on every stream of the app, and a "
            "shard sees only its share: group streams per shard, or run one process"
        )
    if any(app.executor_of(spec) == "ray" for spec in specs):
        raise PipelineError(
            f"{app.name}: the Ray executor already runs instances as actors of their own, "
            "on every machine of the cluster: run a Ray app unsharded"
        )
    named = [e.label() for e in app.edges if e.dst_instance is not None]
    if named:
        raise PipelineError(
            f"{app.name}: a sharded app cannot address one instance ({', '.join(named)}): "
            "each shard holds only some of the instances"
        )
    try:
        return _dumps(app, fresh=True)
    except Exception as exc:  # noqa: BLE001 - which object does not pickle is in the message
        raise PipelineError(
            f"{app.name}: a sharded app runs in other processes, so it must pickle: "
            f"{type(exc).__name__}: {exc}"
        ) from None


# A lock in a component's state crosses as a new one (an unpicklable object otherwise).
_LOCKS = {type(threading.Lock()): threading.Lock, type(threading.RLock()): threading.RLock}


def _fresh(cls, args, kwargs):
    return cls(*args, **kwargs)


class _Pickler(pickle.Pickler):
    """The app goes to the shards as it was built: each component as a fresh instance made
    with its constructor arguments (as `clone` makes one; nothing has run yet). What comes
    back is the components' state, with each lock in it made anew."""

    fresh = False

    def reducer_override(self, obj):
        if self.fresh and isinstance(obj, Component):
            args, kwargs = obj._init_args
            return (_fresh, (type(obj), args, kwargs))
        make = _LOCKS.get(type(obj))
        return NotImplemented if make is None else (make, ())


def _dumps(obj: Any, fresh: bool) -> bytes:
    out = io.BytesIO()
    pickler = _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fresh = fresh
    pickler.dump(obj)
    return out.getvalue()


def _stays(spec) -> bool:
    return tuple(spec.component.executors) == ("thread",)


def _run_part(conn, blob: bytes, i: int, k: int, timeout: float | None, grace: float) -> None:
    """A shard's process: run its part of the app, send back the report and the components
    that live in the app."""
    try:
        app = pickle.loads(blob)
        part = shard(app, i, k)
        report = part.run(timeout=timeout, grace=grace)
        exc = report.exception
        if exc is not None:
            from tinydl.pipeline.process import RemoteError

            report.exception = RemoteError(
                getattr(exc, "type_name", type(exc).__name__), str(exc), ""
            )
        report.deployment = None
        kept = {
            name: part.components[name].component
            for name, spec in part.components.items()
            if _stays(spec)
        }
        conn.send_bytes(_dumps(("ok", report, kept), fresh=False))
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the app
        conn.send_bytes(
            pickle.dumps(("error", f"failed: {type(exc).__name__}: {exc}", traceback.format_exc()))
        )
    finally:
        conn.close()


def run(app: App, k: int, timeout: float | None = None, grace: float = 5.0) -> RunReport:
    """Run `app` as k shards in k processes; the merged report (see the module docstring)."""
    from tinydl.pipeline.process import refuse_start_while_importing_main

    refuse_start_while_importing_main()
    blob = check(app, k)
    app.check()
    ctx = mp.get_context("spawn")
    parts = []
    t0 = time.perf_counter()
    for i in range(k):
        mine, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_run_part,
            args=(theirs, blob, i, k, timeout, grace),
            name=f"tinydl:{app.name}@{i}",
            daemon=False,
        )
        proc.start()
        theirs.close()
        parts.append((proc, mine))
    limit = None if timeout is None else timeout + grace + START_TIMEOUT_S
    results: list[Any] = []
    try:
        for proc, conn in parts:
            left = None if limit is None else max(0.0, limit - (time.perf_counter() - t0))
            if conn.poll(left):
                try:
                    results.append(pickle.loads(conn.recv_bytes()))
                except EOFError:
                    proc.join(grace)
                    results.append(("error", f"ended (exit code {proc.exitcode})", ""))
            else:
                results.append(("error", "did not answer in time", ""))
    except KeyboardInterrupt:
        for proc, _ in parts:
            proc.terminate()
        raise
    finally:
        for proc, conn in parts:
            proc.join(grace)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
    failed = [f"shard {i} {r[1]}\n{r[2]}".rstrip() for i, r in enumerate(results) if r[0] != "ok"]
    if failed:
        raise PipelineError(f"{app.name}: " + "\n".join(failed))
    return merge(app, [r[1] for r in results], [r[2] for r in results], time.perf_counter() - t0)


def merge(app: App, reports: list[RunReport], kept: list[dict], wall_s: float) -> RunReport:
    def total(field: str) -> dict[str, int]:
        c: Counter[str] = Counter()
        for r in reports:
            c.update(getattr(r, field))
        return dict(c)

    rows = []
    for i, r in enumerate(reports):
        for row in r.components:
            rows.append({**row, "component": f"{row['component']}@{i}"})
    merged = RunReport(
        app=app.name,
        frames_in=sum(r.frames_in for r in reports),
        frames_out=sum(r.frames_out for r in reports),
        dropped=total("dropped"),
        errored=total("errored"),
        components=rows,
        wall_s=wall_s,
        errors=[f"@{i}: {e}" for i, r in enumerate(reports) for e in r.errors],
        stopped=next((r.stopped for r in reports if r.stopped), None),
        peak_in_flight=sum(r.peak_in_flight for r in reports),
        exception=next((r.exception for r in reports if r.exception is not None), None),
        branch_errors=total("branch_errors"),
        shards=reports,
        parts={name: [k[name] for k in kept] for name in (kept[0] if kept else {})},
    )
    return merged
