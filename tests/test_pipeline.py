"""Pipeline framework core: connect forms, type checks, policies, batching, streams, config
files, profiler output and the CLI. Every run checks the frame accounting: frames in = out +
dropped (by reason) + errored. Every run has a timeout, so a deadlock fails instead of hanging.
"""

import io
import json
import pickle
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest
from helpers.pipeline import Count, Ticks

from tinydl.cli import main
from tinydl.pipeline import (
    App,
    Batch,
    Component,
    ComponentRunner,
    Frame,
    Packet,
    PipelineError,
    T,
    Tensor,
)
from tinydl.pipeline.components import (
    Batch as BatchStage,
)
from tinydl.pipeline.components import (
    Collect,
    GroupByRequest,
    Resize,
    SplitByFlow,
    SyntheticSource,
    Unbatch,
)
from tinydl.pipeline.config import load_app, parse_markdown

TIMEOUT = 30


class AddOne(Component):
    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def __init__(self, delay: float = 0.0, jitter: bool = False):
        self.delay, self.jitter = delay, jitter

    def process(self, ctx, inputs):
        packet = inputs["in"]
        if self.delay:
            # jitter: a delay that varies by frame, so parallel instances finish out of order
            spread = ((packet.request_id * 7) % 5) / 4 if self.jitter else 1.0
            time.sleep(self.delay * spread)
        return {"out": Tensor(packet.payload.data + 1)}


class Tag(Component):
    """Passes packets through, recording which instance saw them."""

    inputs = {"in": T}
    outputs = {"out": T}

    def __init__(self, seen=None):
        self.seen = seen if seen is not None else []

    def open(self, ctx):
        self.instance = ctx.instance

    def process(self, ctx, inputs):
        self.seen.append((self.instance, inputs["in"].flow_id, inputs["in"].request_id))
        return {"out": inputs["in"]}


class DropOdd(Component):
    """Answers even request ids only (a filter)."""

    inputs = {"in": T}
    outputs = {"out": T}

    def process(self, ctx, inputs):
        return None if inputs["in"].request_id % 2 else {"out": inputs["in"]}


class Pair(Component):
    """Two inputs joined by frame: left + right."""

    inputs = {"left": Tensor, "right": Tensor}
    outputs = {"out": Tensor}

    def process(self, ctx, inputs):
        return {"out": Tensor(inputs["left"].payload.data + inputs["right"].payload.data)}


def balanced(report):
    assert report.balanced, report.accounting()
    assert not any("in flight" in r for r in report.errored), report.accounting()
    return report


def values(collect):
    return [int(p.payload.data[0]) for p in collect.packets]


# -- connect forms -------------------------------------------------------------------------------


@pytest.mark.parametrize("inline_below_us", [20.0, 0.0])
def test_one_to_one(inline_below_us):
    app = App("one", inline_below_us=inline_below_us)
    app.add("src", Count(20))
    app.add("inc", AddOne())
    out = Collect()
    app.add("out", out)
    app.connect("src", "inc")
    app.connect("inc.out", "out.in")
    report = balanced(app.run(timeout=TIMEOUT))
    assert (report.frames_in, report.frames_out) == (20, 20)
    assert values(out) == list(range(1, 21))
    assert [p.request_id for p in out.packets] == list(range(20))


def test_fan_out_gives_every_packet_to_each():
    app = App("fan")
    app.add("src", Count(15))
    a, b = Collect(), Collect()
    app.add("a", a)
    app.add("b", b)
    app.connect("src", ["a", "b"])
    report = balanced(app.run(timeout=TIMEOUT))
    assert values(a) == values(b) == list(range(15))
    assert (report.frames_in, report.frames_out) == (15, 15)  # a frame counts once


def test_ledger_revokes_what_only_a_failed_sink_took():
    """Frames 0-2 reached sinks a and b, 3-4 only a, 5 only a with a copy still in flight:
    when a's output is lost, the frames b also took stay out and the rest are errored."""
    from tinydl.pipeline.accounting import ERROR, OUT, Ledger

    led = Ledger()
    keys = [(0, i) for i in range(6)]
    led.add(keys[:3], copies=2)
    led.add(keys[3:5])
    led.add(keys[5:], copies=2)
    led.end(keys, OUT, "a")
    led.end(keys[:3], OUT, "b")
    assert led.revoke("a", "a: close raised OSError") == 2
    assert (led.frames_out, dict(led.errored)) == (3, {"a: close raised OSError": 2})
    led.end(keys[5:], ERROR, "preview: ValueError")  # its other copy: now errored as a whole
    assert (led.frames_out, led.errored["a: close raised OSError"]) == (3, 3)
    assert led.frames_in == 6 and not led.live and not led.fate and not led.lost


def test_many_to_one_merges_flows():
    app = App("merge")
    app.add("s0", Count(10))
    app.add("s1", Count(12))
    out = Collect()
    app.add("out", out)
    app.connect(["s0", "s1"], "out")
    report = balanced(app.run(timeout=TIMEOUT))
    assert report.frames_in == report.frames_out == 22
    flows = {p.flow_id for p in out.packets}
    assert flows == {0, 1}  # every source gets its own flow id
    for f in flows:
        ids = [p.request_id for p in out.packets if p.flow_id == f]
        assert ids == sorted(ids)


@pytest.mark.parametrize("dispatch", ["round_robin", "by_flow", "least_busy"])
def test_one_to_many_dispatch(dispatch):
    seen = []
    app = App("scatter")
    app.add("src", Count(12), instances=3)  # flows 0, 1, 2
    app.add("w", Tag(seen), instances=3)
    app.add("out", Collect())
    app.connect("src", "w", dispatch=dispatch)
    app.connect("w", "out")
    report = balanced(app.run(timeout=TIMEOUT))
    assert report.frames_out == 36
    per_instance = [sum(1 for i, _, _ in seen if i == k) for k in range(3)]
    assert sum(per_instance) == 36
    if dispatch == "round_robin":
        assert per_instance == [12, 12, 12]
    if dispatch == "by_flow":
        assert all(instance == flow % 3 for instance, flow, _ in seen)


class FlowTag(Tag):
    keeps_flow_state = True  # a tracker's kind: each stream must stay with one instance


def test_components_with_per_flow_state_get_each_flow_on_one_instance():
    """An edge left at round_robin into a component that keeps per-flow state dispatches by
    flow; one asked for least_busy keeps it."""
    for dispatch, by_flow in (("round_robin", True), ("least_busy", False)):
        seen = []
        app = App("trackers")
        app.add("src", Count(12), instances=3)
        app.add("w", FlowTag(seen), instances=2)
        app.add("out", Collect())
        app.connect("src", "w", dispatch=dispatch)
        app.connect("w", "out")
        balanced(app.run(timeout=TIMEOUT))
        assert len(seen) == 36
        if by_flow:
            assert all(instance == flow % 2 for instance, flow, _ in seen)


def test_least_busy_dispatch_passes_a_stuck_instance_by():
    """least_busy sends each packet to the instance with the fewest packets queued. Instance 0
    is stuck on its first frame until the source is done (2 s at most): its queue fills while
    the other two keep up, so it gets its first frame and about one more, and the rest go to the
    others (round_robin would queue a third of the frames on it, by_flow all of them)."""
    n = 60
    release = threading.Event()
    seen = []

    class Paced(Count):
        """Count, a frame per millisecond, so the free instances drain between frames."""

        def process(self, ctx, inputs):
            time.sleep(0.001)
            out = super().process(ctx, inputs)
            if out is None:
                release.set()
            return out

    class StuckFirst(Component):
        inputs = {"in": T}
        outputs = {"out": T}

        def open(self, ctx):
            self.instance, self.stuck = ctx.instance, ctx.instance == 0

        def process(self, ctx, inputs):
            seen.append(self.instance)
            if self.stuck:
                self.stuck = False
                release.wait(2.0)  # bounded: another policy blocks the source on this queue
            return {"out": inputs["in"]}

    app = App("least-busy")
    app.add("src", Paced(n))
    app.add("w", StuckFirst(), instances=3)
    app.add("out", Collect())
    app.connect("src", "w", dispatch="least_busy")
    app.connect("w", "out")
    try:
        report = balanced(app.run(timeout=TIMEOUT))
    finally:
        release.set()
    assert report.frames_out == n and len(seen) == n
    per_instance = [seen.count(k) for k in range(3)]
    assert 1 <= per_instance[0] <= 4, f"the stuck instance got {per_instance[0]} of {n} frames"


def test_instance_addressing():
    seen = []
    app = App("address")
    app.add("src", Count(5))
    app.add("w", Tag(seen), instances=3)
    app.add("out", Collect())
    app.connect("src", "w[2]")
    app.connect("w", "out")
    balanced(app.run(timeout=TIMEOUT))
    assert {i for i, _, _ in seen} == {2}


@pytest.mark.parametrize("inline_below_us", [20.0, 0.0])
def test_collect_restores_request_order(inline_below_us):
    app = App("gather", inline_below_us=inline_below_us)
    app.add("src", Count(40))
    app.add("w", AddOne(delay=0.004, jitter=True), instances=4)
    out = Collect()
    app.add("out", out)
    app.connect("src", "w")
    app.connect("w", "out", collect=True)
    report = balanced(app.run(timeout=TIMEOUT))
    assert report.frames_out == 40
    assert values(out) == list(range(1, 41))


def test_collect_skips_frames_that_never_come():
    """Frames dropped, filtered or failed inside the expanded component do not stall collect."""

    class Flaky(Component):
        inputs = {"in": Tensor}
        outputs = {"out": Tensor}

        def process(self, ctx, inputs):
            r = inputs["in"].request_id
            time.sleep(0.002 * (r % 3))
            if r % 5 == 0:
                raise ValueError("bad frame")
            return None if r % 7 == 0 else {"out": inputs["in"].payload}

    app = App("gaps")
    app.add("src", Count(50))
    app.add("w", Flaky(), instances=3)
    out = Collect()
    app.add("out", out)
    app.connect("src", "w")
    app.connect("w", "out", collect=True)
    report = balanced(app.run(timeout=TIMEOUT))
    expected = [r for r in range(50) if r % 5 and r % 7]
    assert values(out) == expected
    assert all(k.startswith("w[") and k.endswith("]: ValueError") for k in report.errored)
    assert sum(report.errored.values()) == sum(1 for r in range(50) if r % 5 == 0)
    assert all(k.startswith("no output from w[") for k in report.dropped)
    assert sum(report.dropped.values()) == sum(1 for r in range(50) if r % 5 and r % 7 == 0)


def test_join_matches_frames_and_drops_unmatched():
    app = App("join")
    app.add("src", Count(10))
    app.add("inc", AddOne())
    app.add("odd", DropOdd())
    app.add("pair", Pair())
    out = Collect()
    app.add("out", out)
    app.connect("src", ["inc", "odd"])
    app.connect("inc", "pair.left")
    app.connect("odd", "pair.right")
    app.connect("pair", "out")
    report = balanced(app.run(timeout=TIMEOUT))
    assert values(out) == [2 * r + 1 for r in range(0, 10, 2)]
    assert report.frames_out == 5
    # the odd frames: filtered on one branch, no partner on the other
    assert sum(report.dropped.values()) == 5


def test_resource_hooks_bracket_every_call():
    events = []

    class Guarded(AddOne):
        def wait_for_resource(self, ctx):
            events.append("wait")

        def release_resource(self, ctx):
            events.append("release")

        def process(self, ctx, inputs):
            events.append("process")
            if inputs["in"].request_id == 2:
                raise RuntimeError("device lost")
            return super().process(ctx, inputs)

    app = App("guarded")
    app.add("src", Count(4))
    app.add("g", Guarded())
    app.add("out", Collect())
    app.connect("src", "g")
    app.connect("g", "out")
    report = balanced(app.run(timeout=TIMEOUT))
    assert events == ["wait", "process", "release"] * 4  # released also when process raised
    assert report.errored == {"g: RuntimeError": 1}


# -- checks before running -----------------------------------------------------------------------


def test_type_errors_name_both_ends():
    app = App("types")
    app.add("cam", SyntheticSource(count=1))
    app.add("inc", AddOne())
    app.add("out", Collect())
    app.connect("cam", "inc")
    app.connect("inc", "out")
    with pytest.raises(
        PipelineError,
        match=r"edge cam\.out -> inc\.in: cam\.out sends Frame, "
        r"but inc\.in accepts Tensor",
    ):
        app.check()


def test_type_variables_flow_through_batches():
    app = App("generic")
    app.add("cam", SyntheticSource(count=1))
    app.add("batch", BatchStage(max_size=2))
    app.add("unbatch", Unbatch())
    app.add("inc", AddOne())
    app.add("out", Collect())
    app.connect("cam", "batch")
    app.connect("batch", "unbatch")
    app.connect("unbatch", "inc")
    app.connect("inc", "out")
    with pytest.raises(PipelineError, match=r"unbatch\.out sends Frame, but inc\.in accepts"):
        app.check()
    types = _batch_app().check()
    assert types[("batch", "out")] is Batch[Frame]
    assert types[("unbatch", "out")] is Frame


def _batch_app():
    app = App("ok")
    app.add("cam", SyntheticSource(count=1))
    app.add("batch", BatchStage(max_size=2))
    app.add("unbatch", Unbatch())
    app.add("out", Collect())
    app.connect("cam", "batch")
    app.connect("batch", "unbatch")
    app.connect("unbatch", "out")
    return app


def test_graph_problems_are_reported_together():
    app = App("bad")
    app.add("src", Count(1))
    app.add("pair", Pair())
    app.add("w", AddOne(), instances=2)
    app.add("out", Collect())
    app.connect("src", ["pair.left", "w[5]"])
    app.connect("pair", "out")
    app.connect("src", "out", collect=True)
    with pytest.raises(PipelineError) as err:
        app.check()
    text = str(err.value)
    assert "pair.right (Tensor) has no incoming edge" in text
    assert "w has 2 instance(s), so [5] does not exist" in text
    assert "collect gathers the instances of an expanded component" in text


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda app: app.connect("src.nope", "out"), "src has no output port 'nope'"),
        (lambda app: app.connect("src", "ghost"), "no component named 'ghost'"),
        (lambda app: app.connect("src", "out", policy="drop-newest"), "policy must be one of"),
        (lambda app: app.connect("src", "out", policy="drop-if-older-than"), "max_age goes with"),
        (lambda app: app.add("src", Count()), "already used"),
        (lambda app: app.add("c", Collect(), executor="process"), "executor must be one of"),
        (lambda app: app.expand("src", 0), "positive integer"),
    ],
)
def test_build_errors(call, message):
    app = App("errors")
    app.add("src", Count(1))
    app.add("out", Collect())
    with pytest.raises(PipelineError, match=message):
        call(app)


def test_cycle_is_refused():
    app = App("cycle")
    app.add("a", AddOne())
    app.add("b", AddOne())
    app.connect("a", "b")
    app.connect("b", "a")
    with pytest.raises(PipelineError, match="cycle"):
        app.check()


def test_help_prints_the_graph(capsys):
    app = App("shown")
    app.add("src", Count(1), instances=2)
    app.add("w", AddOne(), instances=3, timeout=2)
    app.add("out", Collect())
    app.connect("src", "w", dispatch="by_flow", policy="drop-oldest", capacity=2)
    app.connect("w", "out", collect=True)
    text = app.help()
    assert capsys.readouterr().out == text
    flat = " ".join(text.split())
    assert "w AddOne x3 [thread, timeout 2 s] (in: Tensor) -> (out: Tensor)" in flat
    assert "src.out -> w.in one-to-many (by_flow over 3); drop-oldest, capacity 2" in flat
    assert "w.out -> out.in collect; block, capacity 8" in flat


# -- queue policies and overload ------------------------------------------------------------------


def run_policy(policy, capacity=2, n=60, delay=0.003, **kw):
    app = App(policy)
    app.add("src", Count(n))
    app.add("slow", AddOne(delay=delay))
    out = Collect()
    app.add("out", out)
    app.connect("src", "slow", policy=policy, capacity=capacity, **kw)
    app.connect("slow", "out")
    report = balanced(app.run(timeout=TIMEOUT))
    row = next(r for r in report.components if r["component"] == "slow")
    assert row["queue_high_water"] <= capacity
    return report, values(out)


def test_block_policy_loses_nothing():
    report, got = run_policy("block")
    assert got == list(range(1, 61)) and not report.dropped


@pytest.mark.parametrize(
    "policy, reason",
    [
        ("drop-oldest", "queue full (drop-oldest) on src.out -> slow.in"),
        ("keep-latest", "superseded (keep-latest) on src.out -> slow.in"),
    ],
)
def test_dropping_policies_count_every_drop(policy, reason):
    report, got = run_policy(policy)
    assert report.dropped.get(reason, 0) > 0
    assert set(report.dropped) == {reason}
    assert report.frames_out == len(got) == 60 - report.dropped[reason]
    assert got == sorted(got) and got[-1] == 60  # the newest frame always gets through


def test_drop_if_older_than():
    report, got = run_policy("drop-if-older-than", capacity=8, delay=0.01, n=30, max_age=0.015)
    reason = "older than 0.015 s on src.out -> slow.in"
    assert report.dropped.get(reason, 0) > 0
    assert report.frames_out + report.dropped[reason] == 30


# -- batching and streams -----------------------------------------------------------------------


def test_batch_and_unbatch_in_an_app():
    app = App("batching")
    app.add("src", Count(10))
    app.add("batch", BatchStage(max_size=4, max_wait=None))
    app.add("unbatch", Unbatch())
    app.add("inc", AddOne())
    out = Collect()
    app.add("out", out)
    for a, b in [("src", "batch"), ("batch", "unbatch"), ("unbatch", "inc"), ("inc", "out")]:
        app.connect(a, b)
    report = balanced(app.run(timeout=TIMEOUT))
    assert values(out) == list(range(1, 11))
    row = next(r for r in report.components if r["component"] == "unbatch")
    assert (row["calls"], row["items"], row["max_batch"]) == (3, 10, 4)


def test_batch_max_wait_with_simulated_time():
    runner = ComponentRunner(BatchStage(max_size=3, max_wait=0.0025), period_s=0.001)
    out = runner.run({"in": [Tensor(np.array([i])) for i in range(5)]})["out"]
    # items at 0, 1, 2 ms fill a batch; 3 ms and 4 ms wait until 3 + 2.5 ms, then go together
    assert [len(p.payload) for p in out] == [3, 2]
    assert [[q.request_id for q in p.payload.items] for p in out] == [[0, 1, 2], [3, 4]]
    runner = ComponentRunner(BatchStage(max_size=8, max_wait=0.0015), period_s=0.001)
    out = runner.run({"in": [Tensor(np.array([i])) for i in range(5)]})["out"]
    assert [len(p.payload) for p in out] == [2, 2, 1]


def test_dynamic_batching_grows_when_the_consumer_lags():
    app = App("dynamic")
    app.add("src", Count(40))
    app.add("batch", BatchStage(max_size=8, max_wait=0))
    app.add("unbatch", Unbatch())
    out = Collect()
    app.add("out", out)

    class Slow(Component):
        inputs = {"in": Batch[Tensor]}
        outputs = {"out": Batch[Tensor]}

        def process(self, ctx, inputs):
            time.sleep(0.01)
            return {"out": inputs["in"]}

    app.add("model", Slow())
    app.connect("src", "batch")
    app.connect("batch", "model", capacity=1)
    app.connect("model", "unbatch")
    app.connect("unbatch", "out")
    report = balanced(app.run(timeout=TIMEOUT))
    assert values(out) == list(range(40))
    row = next(r for r in report.components if r["component"] == "model")
    assert row["max_batch"] > 1 and row["calls"] < 40


def test_group_by_request_and_split_by_flow():
    app = App("streams")
    app.add("cam", Count(8), instances=3)  # flows 0, 1, 2
    app.add("group", GroupByRequest(streams=3))
    app.add("sizes", Tag())
    app.add("split", SplitByFlow(flows=3))
    outs = [Collect() for _ in range(3)]
    for i, c in enumerate(outs):
        app.add(f"out{i}", c)
        app.connect(f"split.flow{i}", f"out{i}")
    app.connect("cam", "group")
    app.connect("group", "sizes")
    app.connect("sizes", "split")
    report = balanced(app.run(timeout=TIMEOUT))
    assert report.frames_in == report.frames_out == 24
    for flow, c in enumerate(outs):
        assert {p.flow_id for p in c.packets} == {flow}
        assert [p.request_id for p in c.packets] == list(range(8))
    row = next(r for r in report.components if r["component"] == "sizes")
    assert (row["calls"], row["mean_batch"]) == (8, 3.0)


def test_group_by_request_lets_incomplete_groups_go_in_order():
    packets = [
        Packet(Tensor(np.array([r])), flow, r, timestamp=r * 1_000_000 + flow)
        for r in range(4)
        for flow in range(2)
        if (flow, r) != (1, 1)
    ]  # flow 1 lost r=1
    out = ComponentRunner(GroupByRequest(streams=2)).run({"in": packets})["out"]
    assert [p.request_id for p in out] == [0, 1, 2, 3]
    assert [len(p.payload) for p in out] == [2, 1, 2, 2]
    assert [p.flow_id for p in out[1].payload.items] == [0]
    out = ComponentRunner(GroupByRequest(streams=2, max_wait=0.0005)).run({"in": packets[:3]})[
        "out"
    ]  # r=1 of flow 0 waits 0.5 ms, then leaves alone
    assert [len(p.payload) for p in out] == [2, 1]


def test_component_runner_on_a_source_and_a_transform():
    frames = ComponentRunner(SyntheticSource(count=3, width=8, height=6)).run()["out"]
    assert [p.request_id for p in frames] == [0, 1, 2]
    assert [int(p.payload.image[0, 0, 0]) for p in frames] == [0, 1, 2]
    out = ComponentRunner(Resize(width=4)).run({"in": frames})["out"]
    assert [p.payload.image.shape for p in out] == [(3, 4, 3)] * 3
    assert [p.request_id for p in out] == [0, 1, 2]


# -- executors --------------------------------------------------------------------------------


def test_process_executor_gives_the_same_frames_as_threads():
    def build(executor):
        app = App(executor, executor=executor)
        app.add("cam", SyntheticSource(count=6, width=96, height=64), executor="thread")
        app.add("small", Resize(width=48))
        out = Collect()
        app.add("out", out)
        app.connect("cam", "small")
        app.connect("small", "out")
        report = balanced(app.run(timeout=TIMEOUT))
        assert report.frames_out == 6
        return [p.payload.image for p in out.packets]

    threads, procs = build("thread"), build("process")
    for a, b in zip(threads, procs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_shared_memory_transport_pickles_no_pixels():
    from tinydl.pipeline.process import Arena, dumps, loads

    arena = Arena()
    try:
        image = np.arange(720 * 1280 * 3, dtype=np.uint8).reshape(720, 1280, 3)
        payload = {"in": Packet(Frame(image[:, ::2], "rgb"), 3, 7)}  # not contiguous
        message = dumps(payload, arena)
        assert len(pickle.dumps(message)) < 2000  # ids and layout; the pixels went to shared memory
        back = loads(message, {}, copy=True)["in"]
        assert (back.flow_id, back.request_id) == (3, 7)
        np.testing.assert_array_equal(back.payload.image, image[:, ::2])
    finally:
        arena.release()


# -- config files, profiler output, CLI ------------------------------------------------------------

YAML_APP = """
app: tiny
capacity: 4
vars: {frames: 6}
components:
  cam: {type: SyntheticSource, options: {count: "${frames}", width: 32, height: 24}, instances: 2}
  small: {type: Resize, options: {width: 16}}
  group: {type: GroupByRequest, options: {streams: 2}}
  split: {type: SplitByFlow, options: {flows: 2}}
  out: {type: Collect, instances: 2}
connections:
  - cam -> small
  - "small.out -> group.in (policy: block, capacity: 2)"
  - group -> split
  - split.flow0 -> out[0]
  - {from: split.flow1, to: "out[1]"}
"""

MD_APP = """
# tiny

Two synthetic cameras, resized, grouped and split again.

## Settings

- capacity: 4

## Variables

- frames: 6

## Components

| name  | type            | options                                        | instances |
|-------|-----------------|------------------------------------------------|-----------|
| cam   | SyntheticSource | count: "${frames}", width: 32, height: 24      | 2         |
| small | `Resize`        | width: 16                                      |           |
| group | GroupByRequest  | streams: 2                                     |           |
| split | SplitByFlow     | flows: 2                                       |           |
| out   | Collect         |                                                | 2         |

## Connections

- cam -> small
- small.out -> group.in (policy: block, capacity: 2)
- group -> split
- split.flow0 -> out[0]
- split.flow1 -> out[1]
"""


def test_yaml_and_markdown_describe_the_same_app(tmp_path):
    (tmp_path / "tiny.yaml").write_text(YAML_APP)
    (tmp_path / "tiny.md").write_text(MD_APP)
    a, b = load_app(tmp_path / "tiny.yaml"), load_app(tmp_path / "tiny.md")
    assert a.help(file=io.StringIO()) == b.help(file=io.StringIO())
    report = balanced(b.run(timeout=TIMEOUT))
    assert report.frames_out == 12
    first = b.components["out"].component  # instance 0 is the object given; the others clones
    assert [p.flow_id for p in first.packets] == [0] * 6


def test_config_variables_override_and_errors(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(YAML_APP)
    app = load_app(path, {"frames": 2})
    assert app.components["cam"].component.count == 2
    for bad, message in [
        (YAML_APP.replace("Resize", "Resise"), "unknown component type 'Resise'"),
        (YAML_APP.replace("width: 16", "widht: 16"), r"Resize: unknown option\(s\) \['widht'\]"),
        (YAML_APP.replace("cam -> small", "cam => small"), "cannot read 'cam => small'"),
        (YAML_APP.replace("${frames}", "${nframes}"), r"unknown variable \$\{nframes\}"),
        (YAML_APP.replace("capacity: 2)", "capacity: 2, colour: red)"), "unknown option"),
    ]:
        path.write_text(bad)
        with pytest.raises(PipelineError, match=message):
            load_app(path)
    with pytest.raises(PipelineError, match="needs 'name' and 'type'"):
        parse_markdown("## Components\n| kind | options |\n|--|--|\n| a | b |\n")


def test_busy_poll_is_read_from_the_app_file_and_checked(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("busy_poll_us: 2500\n" + YAML_APP)
    assert load_app(path).busy_poll_us == 2500.0
    path.write_text(YAML_APP)
    assert load_app(path).busy_poll_us == 0.0
    with pytest.raises(PipelineError, match=r"busy_poll_us must be in \[0, 1e6\], got -1"):
        App("bad", busy_poll_us=-1)


def test_components_in_a_module_next_to_the_app_file(tmp_path, monkeypatch):
    """`type: module:Class` finds a .py beside the app file without PYTHONPATH, in the app's
    process and in its worker processes."""
    import sys
    import uuid

    monkeypatch.setattr(sys, "path", list(sys.path))  # the app's folder joins it
    module = f"beside_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from tinydl.pipeline import Component, Tensor\n\n\n"
        "class Negate(Component):\n"
        "    inputs = {'in': Tensor}\n"
        "    outputs = {'out': Tensor}\n\n"
        "    def process(self, ctx, inputs):\n"
        "        return {'out': Tensor(-inputs['in'].payload.data)}\n"
    )
    (tmp_path / "app.yaml").write_text(
        "components:\n"
        "  tensor: {type: 'helpers.pipeline:Count', options: {n: 3}}\n"
        f"  neg: {{type: '{module}:Negate', executor: process}}\n"
        "  out: {type: Collect}\n"
        "connections: [tensor -> neg, neg -> out]\n"
    )
    app = load_app(tmp_path / "app.yaml")
    report = balanced(app.run(timeout=TIMEOUT))
    assert report.frames_out == 3 and not report.errors
    negated = app.components["out"].component.payloads()
    assert [int(t.data[0]) for t in negated] == [0, -1, -2]


def test_trace_and_summary(tmp_path):
    app = App("traced")
    app.add("src", Count(10))
    app.add("inc", AddOne(), instances=2)
    app.add("out", Collect())
    app.connect("src", "inc")
    app.connect("inc", "out")
    report = balanced(app.run(timeout=TIMEOUT, trace=str(tmp_path / "t.json")))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {"src (thread)", "inc[0] (thread)", "inc[1] (thread)", "out (thread)"}
    spans = [e for e in events if e["ph"] == "X"]
    assert sum(1 for e in spans if e["name"] == "inc") == 10
    assert all(e["dur"] >= 0 for e in spans)
    table = report.table()
    for name in ("src", "inc[0]", "inc[1]", "out", "ms/item", "wait ms"):
        assert name in table
    assert "frames in 10 = out 10 + dropped 0 + errored 0" in str(report)


def test_cli_pipeline_run_and_help(tmp_path, capsys):
    (tmp_path / "tiny.yaml").write_text(YAML_APP)
    trace = tmp_path / "trace.json"
    assert (
        main(
            [
                "pipeline",
                "run",
                str(tmp_path / "tiny.yaml"),
                "--set",
                "frames=3",
                "--trace",
                str(trace),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "frames in 6 = out 6 + dropped 0 + errored 0" in out
    assert json.loads(trace.read_text())["traceEvents"]
    assert main(["pipeline", "help", str(tmp_path / "tiny.yaml")]) == 0
    assert "split.flow1 -> out[1].in" in capsys.readouterr().out
    assert main(["pipeline", "run", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_no_threads_left_behind():
    app = App("clean")
    app.add("src", Count(5))
    app.add("out", Collect())
    app.connect("src", "out")
    app.run(timeout=TIMEOUT)
    time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name.startswith("tinydl:")]


class _Switch(Component):
    inputs = {"in": Any}
    outputs: dict = {}
    seen: list[float] = []

    def process(self, ctx, inputs):
        self.seen.append(sys.getswitchinterval())


@pytest.mark.parametrize("ms", [0.25, None])
def test_the_gil_switch_interval_is_set_while_an_app_runs_and_restored(ms):
    before = sys.getswitchinterval()
    _Switch.seen.clear()
    app = App("switch", switch_interval_ms=ms)
    app.add("src", SyntheticSource(count=3))
    app.add("out", _Switch())
    app.connect("src", "out")
    assert app.run(timeout=30).balanced
    assert _Switch.seen == [before if ms is None else ms / 1e3] * 3
    assert sys.getswitchinterval() == before
    with pytest.raises(PipelineError, match="switch_interval_ms must be in"):
        App("bad", switch_interval_ms=0)


def paced_source_gaps(executor: str, n: int = 8, gap_s: float = 0.05) -> np.ndarray:
    """The times between frames of a source that asks for a tick after each one."""
    app = App(f"ticks-{executor}")
    app.add("src", Ticks(n, gap_s), executor=executor)
    out = Collect()
    app.add("out", out)
    app.connect("src", "out")
    report = app.run(timeout=60)
    assert report.frames_out == n, report.accounting()
    made = np.array([int(p.payload.data[0]) for p in out.packets])
    return np.diff(made) / 1e9


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_source_paced_by_ticks_keeps_its_pace(executor):
    # In a worker, a tick that has fired must not be asked for again: the worker's copy of the
    # context once kept the first tick, and the source then ran with no pause at all.
    gaps = paced_source_gaps(executor)
    assert gaps.min() >= 0.045, gaps
