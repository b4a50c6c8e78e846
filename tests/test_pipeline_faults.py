"""Pipeline faults and overload: components that raise, hang past their timeout, or whose worker
process dies; apps stopped early; a source 10x faster than its consumer. In every case the app
ends (each run has a timeout, so a deadlock fails the test instead of hanging it), every frame is
accounted for, and no thread, process or shared-memory segment is left behind.
"""

import multiprocessing
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from helpers.pipeline import Count, SlowToStart, Ticks

from tinydl.pipeline import App, Component, Frame, PipelineError, Tensor
from tinydl.pipeline.components import Collect, SyntheticSource

TIMEOUT = 30
RELEASE = threading.Event()  # lets a hung component go at the end of its test


class Faulty(Component):
    """Passes frames through, but raises, hangs or kills its process on chosen frames."""

    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def __init__(self, raise_on=(), hang_on=(), die_on=(), hang_s: float = 30.0):
        self.raise_on, self.hang_on, self.die_on = set(raise_on), set(hang_on), set(die_on)
        self.hang_s = hang_s

    def process(self, ctx, inputs):
        r = inputs["in"].request_id
        if r in self.raise_on:
            raise ValueError(f"frame {r} is bad")
        if r in self.hang_on:
            RELEASE.wait(self.hang_s)  # a hang (in a worker process: until it is killed)
        if r in self.die_on:
            os._exit(7)
        return {"out": inputs["in"].payload}


class FailsToOpen(Component):
    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def open(self, ctx):
        raise FileNotFoundError("weights.bin")


def shm_segments() -> set[str]:
    """This process's shared-memory segments (workers name theirs after it too)."""
    from tinydl.pipeline.process import segment_prefix

    shm = Path("/dev/shm")
    return {p.name for p in shm.glob(segment_prefix() + "*")} if shm.exists() else set()


@pytest.fixture(autouse=True)
def clean_shutdown():
    """Nothing of an app may outlive it: threads, worker processes, shared memory."""
    RELEASE.clear()
    before = shm_segments()
    yield
    RELEASE.set()  # abandoned hung calls may return now; they end on their own
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        multiprocessing.active_children()
        or [t for t in threading.enumerate() if t.name.startswith("tinydl:")]
    ):
        time.sleep(0.05)
    assert not multiprocessing.active_children()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("tinydl:")]
    assert shm_segments() <= before


def faulty_app(executor: str, n: int = 20, timeout=None, max_restarts: int = 3, **faults):
    app = App("faults")
    app.add("src", Count(n))
    app.add("f", Faulty(**faults), executor=executor, timeout=timeout, max_restarts=max_restarts)
    out = Collect()
    app.add("out", out)
    app.connect("src", "f")
    app.connect("f", "out")
    return app, out


def got(out) -> list[int]:
    return [int(p.payload.data[0]) for p in out.packets]


def check(report, n: int):
    assert report.balanced, report.accounting()
    assert report.frames_in == n
    assert not any("in flight" in r for r in report.errored), report.accounting()


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_component_that_raises(executor):
    app, out = faulty_app(executor, raise_on={3, 11})
    report = app.run(timeout=TIMEOUT)
    check(report, 20)
    assert got(out) == [r for r in range(20) if r not in (3, 11)]
    assert report.errored == {"f: ValueError": 2}
    assert any("frame 3 is bad" in e for e in report.errors)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_component_that_hangs_past_its_timeout(executor):
    app, out = faulty_app(executor, hang_on={4}, timeout=0.5 if executor == "thread" else 2.0)
    t0 = time.monotonic()
    report = app.run(timeout=TIMEOUT)
    assert time.monotonic() - t0 < 15
    check(report, 20)
    assert got(out) == [r for r in range(20) if r != 4]
    assert report.errored == {"f: timeout": 1}
    assert next(r for r in report.components if r["component"] == "f")["restarts"] == 1


def test_the_timeout_counts_from_the_call_not_from_the_worker_start():
    """A worker that takes longer to start (spawn, imports, unpickling) than the component's
    timeout is no hang: the timeout covers open and each call, as on a busy machine."""
    app = App("slow start")
    app.add("src", Count(5))
    app.add("f", SlowToStart(delay=1.5), executor="process", timeout=1.0)
    out = Collect()
    app.add("out", out)
    app.connect("src", "f")
    app.connect("f", "out")
    report = app.run(timeout=TIMEOUT)
    check(report, 5)
    assert got(out) == list(range(5)) and not report.errors
    assert next(r for r in report.components if r["component"] == "f")["restarts"] == 0


SCRIPT = """
import numpy as np
from tinydl.pipeline import App, Component, Tensor
from tinydl.pipeline.components import Collect


class Source(Component):
    inputs = {}
    outputs = {"out": Tensor}

    def open(self, ctx):
        self.i = 0

    def process(self, ctx, inputs):
        self.i += 1
        return {"out": Tensor(np.array([self.i]))} if self.i <= 3 else None


class Twice(Component):
    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def process(self, ctx, inputs):
        return {"out": Tensor(inputs["in"].payload.data * 2)}


def main():
    app = App("script")
    app.add("src", Source())
    app.add("twice", Twice(), executor="process")
    app.add("out", Collect())
    app.connect("src", "twice")
    app.connect("twice", "out")
    print(app.run(timeout=60).accounting())
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_without_a_main_guard_is_told_why(tmp_path, guarded):
    """A script that runs an app with process instances at import level: each worker imports
    it again (spawn), so it must guard the run; the error says so, and nothing else breaks."""
    script = tmp_path / "app_script.py"
    guard = 'if __name__ == "__main__":\n    main()\n' if guarded else "main()\n"
    script.write_text(SCRIPT + guard)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    if guarded:
        assert run.returncode == 0, run.stderr
        assert "frames in 3 = out 3" in run.stdout
    else:
        assert run.returncode == 1
        assert 'under `if __name__ == "__main__":`' in run.stderr
        assert str(script) in run.stderr
        assert "AssertionError" not in run.stderr and "Exception in thread" not in run.stderr


def test_process_worker_that_dies():
    app, out = faulty_app("process", die_on={5, 9})
    report = app.run(timeout=TIMEOUT)
    check(report, 20)
    assert got(out) == [r for r in range(20) if r not in (5, 9)]
    assert report.errored == {"f: worker died": 2}
    assert any("exit code 7" in e for e in report.errors)


def test_worker_that_keeps_dying_is_given_up():
    app, out = faulty_app("process", n=12, die_on=set(range(3, 12)), max_restarts=2)
    report = app.run(timeout=TIMEOUT)
    check(report, 12)
    assert got(out) == [0, 1, 2]
    assert report.errored["f: worker died"] == 3  # frames 3, 4, 5: the first death, 2 restarts
    gave_up = [k for k in report.errored if "gave up after 2 restarts" in k]
    assert len(gave_up) == 1 and report.errored[gave_up[0]] == 6


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_stop_on_error_stops_at_the_first_error(executor):
    """App(stop_on_error=True): the first error stops the app, every frame is still accounted
    for, the report keeps the exception, and components see why at close."""
    app, out = faulty_app(executor, n=200, raise_on={3})
    app.stop_on_error = True
    report = app.run(timeout=TIMEOUT)
    assert report.balanced, report.accounting()
    assert report.stopped.startswith("stop_on_error: f: ValueError")
    assert report.errored == {"f: ValueError": 1}
    assert 3 not in got(out) and len(got(out)) < 200  # what was queued is dropped
    exc = report.exception
    assert "frame 3 is bad" in str(exc)
    assert isinstance(exc, ValueError) if executor == "thread" else exc.type_name == "ValueError"


def test_app_timeout_stops_a_component_hung_without_a_timeout():
    app, out = faulty_app("thread", n=50, hang_on={2})
    t0 = time.monotonic()
    report = app.run(timeout=1.0, grace=0.5)
    assert time.monotonic() - t0 < 5
    assert report.stopped == "timeout after 1 s"
    assert report.balanced, report.accounting()
    assert got(out) == [0, 1]
    assert any("left behind" in e for e in report.errors)
    assert report.dropped.get("app stopped", 0) > 0  # what was queued behind the hang


def test_stop_while_running_accounts_for_everything():
    app = App("stopped")
    app.add("cam", SyntheticSource(count=None, fps=0))
    app.add("out", Collect())
    app.connect("cam", "out")
    rt = app.start()
    time.sleep(0.3)
    rt.stop("enough")
    assert rt.join(5.0) == []
    report = rt.report()
    assert report.stopped == "enough"
    assert report.frames_in > 0 and report.balanced, report.accounting()


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_stop_ends_a_source_paused_for_its_next_tick(executor):
    """A source asleep until a tick far away (30 s) ends at once when the app stops, its
    frames so far recorded in its stats and accounted for; a stop before its first pause too."""
    for wait_s in (0.5, 0.0):
        app = App("paused")
        app.add("cam", SyntheticSource(count=None, fps=1 / 30), executor=executor)
        app.add("out", Collect())
        app.connect("cam", "out")
        rt = app.start()
        time.sleep(wait_s)
        t0 = time.monotonic()
        rt.stop("enough")
        assert rt.join(5.0) == []
        assert time.monotonic() - t0 < 3
        report = rt.report()
        assert report.stopped == "enough" and report.balanced, report.accounting()
        if wait_s:
            assert report.frames_in == 1
            assert rt.nodes["cam"][0].stats.calls == 1


def test_open_failure_is_an_error_naming_the_component():
    app = App("broken")
    app.add("src", Count(5))
    app.add("model", FailsToOpen())
    app.add("out", Collect())
    app.connect("src", "model")
    app.connect("model", "out")
    with pytest.raises(PipelineError, match="open failed in model: FileNotFoundError: weights"):
        app.run(timeout=TIMEOUT)


class Slow(Component):
    inputs = {"in": Frame}
    outputs: dict = {}

    def __init__(self, delay: float):
        self.delay = delay
        self.seen = 0

    def process(self, ctx, inputs):
        time.sleep(self.delay)
        self.seen += 1


@pytest.mark.parametrize("policy", ["block", "drop-oldest"])
def test_overload_keeps_memory_bounded(policy):
    """A source at 1000 fps (640x480 frames) into a consumer of 100 fps, for 2 s."""
    app = App("overload")
    app.add("cam", SyntheticSource(count=None, fps=1000, width=640, height=480))
    sink = Slow(0.01)
    app.add("slow", sink)
    app.connect("cam", "slow", policy=policy, capacity=4)
    tracemalloc.start()
    try:
        report = app.run(timeout=2.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.stopped == "timeout after 2 s"
    assert report.balanced, report.accounting()
    frame = 640 * 480 * 3
    assert peak < 30 * frame  # queue capacity 4: a bounded number of frames alive at once
    assert report.peak_in_flight <= 8
    row = next(r for r in report.components if r["component"] == "slow")
    assert row["queue_high_water"] <= 4
    assert 50 <= sink.seen <= 250
    if policy == "block":  # backpressure slows the source down to the consumer
        assert report.frames_in <= sink.seen + 10
    else:  # the source runs at its own pace and the queue sheds the excess
        assert report.frames_in > 2 * sink.seen
        assert sum(report.dropped.values()) > sink.seen


# -- a packet sent to a sleeping worker by the sender's thread (forward) ---------------------


def paced_app(n: int, sources: int = 1, timeout=None, **faults):
    """Sources paced 10 ms apart: the worker is asleep at each frame, so the source's thread
    sends it the frame itself and the worker's own thread only waits for the answer."""
    app = App("forward")
    app.add("src", Ticks(n, 0.01), instances=sources)
    app.add("f", Faulty(**faults), executor="process", timeout=timeout)
    out = Collect()
    app.add("out", out)
    app.connect("src", "f")
    app.connect("f", "out")
    return app, out


def row(report, name: str) -> dict:
    return next(r for r in report.components if r["component"] == name)


def test_a_sleeping_worker_is_sent_frames_by_the_senders_thread():
    app, out = paced_app(12, sources=2)
    report = app.run(timeout=TIMEOUT)
    check(report, 24)
    assert report.frames_out == 24
    for flow in (0, 1):  # each stream in order
        ids = [p.request_id for p in out.packets if p.flow_id == flow]
        assert ids == list(range(12))
    assert row(report, "f")["forwarded"] > 0, row(report, "f")  # most, on an idle machine


def test_a_worker_that_dies_on_a_forwarded_frame():
    app, out = paced_app(10, die_on={3, 7})
    report = app.run(timeout=TIMEOUT)
    check(report, 10)
    assert [p.request_id for p in out.packets] == [0, 1, 2, 4, 5, 6, 8, 9]
    assert report.errored == {"f: worker died": 2}
    assert row(report, "f")["forwarded"] > 0 and row(report, "f")["restarts"] == 2


def test_a_forwarded_call_past_its_timeout():
    app, out = paced_app(6, timeout=1.0, hang_on={2})
    report = app.run(timeout=TIMEOUT)
    check(report, 6)
    assert [p.request_id for p in out.packets] == [0, 1, 3, 4, 5]
    assert report.errored == {"f: timeout": 1}


def test_stop_with_a_forwarded_call_outstanding():
    app, out = paced_app(50, hang_on={3})
    report = app.run(timeout=1.0, grace=0.5)
    assert report.stopped == "timeout after 1 s"
    assert report.balanced, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 2]
