"""Direct edges: a worker sends its packet straight to the next worker (process executor), the
app still accounts for every frame; and packets sent to a sleeping worker by the sender's
thread (forward). Sources are paced so the next worker is asleep when each frame comes."""

import multiprocessing
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.pipeline import (
    CheckFrames,
    OncePickled,
    PoolFrames,
    Scale,
    Sleep,
    SlowSide,
    Ticks,
)

from tinydl.pipeline import App
from tinydl.pipeline.components import Collect
from tinydl.pipeline.process import segment_prefix

TIMEOUT = 60


def shm_segments() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.glob(segment_prefix() + "*")} if shm.exists() else set()


@pytest.fixture(autouse=True)
def nothing_left():
    before = shm_segments()
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and multiprocessing.active_children():
        time.sleep(0.05)
    assert not multiprocessing.active_children()
    assert shm_segments() <= before


def row(report, name: str) -> dict:
    return next(r for r in report.components if r["component"] == name)


def chain(
    source, *stages, executor="process", source_executor="thread", **options
) -> tuple[App, Collect]:
    app = App("direct", **options)
    app.add("src", source, executor=source_executor)
    names = ["src"]
    for i, stage in enumerate(stages):
        app.add(f"s{i}", stage, executor=executor)
        names.append(f"s{i}")
    out = Collect()
    app.add("out", out)
    names.append("out")
    for a, b in zip(names[:-1], names[1:], strict=True):
        app.connect(a, b)
    return app, out


@pytest.mark.parametrize("pooled", [False, True])
def test_two_workers_in_a_row_pass_frames_directly(pooled):
    app, out = chain(Ticks(12, 0.01), Scale(3, pooled=pooled), Scale(5, pooled=pooled))
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 12, report.accounting()
    assert [p.request_id for p in out.packets] == list(range(12))
    made = [int(p.payload.data[0]) for p in out.packets]
    stamps = np.array(made) // 15  # each stage multiplied what it got
    assert (stamps * 15 == made).all()
    assert row(report, "s1")["direct"] > 0, row(report, "s1")  # the rest: forward or queued
    assert row(report, "s0")["direct"] == 0  # its producer is a thread


def test_a_source_worker_sends_its_frames_directly():
    frames = PoolFrames(n=30, height=270, width=480)
    app, out = chain(frames, CheckFrames(), source_executor="process")
    # PoolFrames is not paced: frames that find the checker busy queue in the app instead.
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 30, report.accounting()
    assert [int(p.payload.image[0, 0, 0]) for p in out.packets] == list(range(30))
    assert [p.request_id for p in out.packets] == list(range(30))


def test_a_paced_source_worker_goes_direct_with_the_apps_frame_ids():
    app, out = chain(Ticks(10, 0.01), Scale(2), source_executor="process")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 10, report.accounting()
    assert [(p.flow_id, p.request_id) for p in out.packets] == [(0, i) for i in range(10)]
    assert row(report, "s0")["direct"] > 0, row(report, "s0")


@pytest.mark.parametrize("source_executor", ["thread", "process"])
def test_busy_polling_workers_pass_every_frame_and_stop(source_executor):
    # Each worker polls its pipes for 50 ms after a call (longer than the 10 ms between
    # frames, so the frames come while it polls) and sleeps on them after that, at the end.
    app, out = chain(
        Ticks(12, 0.01),
        Scale(3, pooled=True),
        Scale(5, pooled=True),
        source_executor=source_executor,
        busy_poll_us=50_000,
    )
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 12, report.accounting()
    assert [p.request_id for p in out.packets] == list(range(12))
    assert [int(p.payload.data[0]) % 15 for p in out.packets] == [0] * 12
    # Some frames went down a direct edge into a polling worker (which ones depends on timing).
    assert row(report, "s0")["direct"] + row(report, "s1")["direct"] > 0, report.components


def test_a_busy_polling_reader_gets_messages_while_polling_and_after():
    from tinydl.pipeline import process

    app_end, worker_end = multiprocessing.Pipe()
    direct_in, direct_out = multiprocessing.Pipe(duplex=False)
    read = process._reader(worker_end, direct_in, busy_poll_ns=2_000_000)

    def within(seconds: float = 5.0):
        got: list = []
        t = threading.Thread(target=lambda: got.append(_outcome(read)), daemon=True)
        t.start()
        t.join(seconds)
        assert got, f"no message within {seconds} s"
        return got[0]

    app_end.send_bytes(b"now")  # already there: found by the first poll
    assert within() == (worker_end, b"now")
    threading.Timer(0.03, direct_out.send_bytes, (b"later",)).start()  # after the poll gave up
    t0 = time.perf_counter()
    assert within() == (direct_in, b"later")
    assert time.perf_counter() - t0 >= 0.025
    direct_out.close()  # the direct edge's sender goes: the app's end is read alone
    threading.Timer(0.01, app_end.send_bytes, (b"last",)).start()
    assert within() == (worker_end, b"last")
    app_end.close()
    assert within() is EOFError


def _outcome(read):
    try:
        return read()
    except EOFError:
        return EOFError


def test_large_plain_arrays_are_copied_once_and_stay_intact():
    # Scale returns plain NumPy frames (not from ctx.empty): the worker copies each into a
    # frame block once, for the next worker and the app alike; the checker reads it later.
    app, out = chain(PoolFrames(n=16, height=270, width=480), Scale(1), CheckFrames(delay=0.005))
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 16, report.accounting()
    assert [int(p.payload.image[0, 0, 0]) for p in out.packets] == list(range(16))


def test_a_call_with_no_packet_for_the_next_worker_lets_it_go():
    app, out = chain(Ticks(12, 0.01), Scale(2, skip={2, 3, 7}), Scale(3))
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 9, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 4, 5, 6, 8, 9, 10, 11]
    assert report.dropped == {"no output from s0": 3}, report.accounting()


def test_a_frame_sent_directly_whose_answer_fails_is_errored_once():
    # Frame 4 reaches the second worker directly, then the first worker cannot answer the app:
    # the frame is errored there, and the second worker's answer for it is dropped.
    app, out = chain(Ticks(10, 0.01), OncePickled(bad=4), Scale(2))
    report = app.run(timeout=TIMEOUT)
    assert report.balanced, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert list(report.errored) == ["s0: TypeError"] and report.errored["s0: TypeError"] == 1


def test_a_worker_that_dies_on_a_frame_sent_directly():
    app, out = chain(Ticks(10, 0.01), Scale(2), Scale(3, exit_on={3, 6}))
    report = app.run(timeout=TIMEOUT)
    assert report.balanced, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 2, 4, 5, 7, 8, 9]
    assert report.errored == {"s1: worker died": 2}
    assert row(report, "s1")["restarts"] == 2 and row(report, "s1")["direct"] > 0


def test_a_producer_that_dies_lets_the_next_worker_go():
    # The first worker dies on frame 3 (a reserved call): the second must not wait for it.
    app, out = chain(Ticks(8, 0.01), Scale(2, exit_on={3}), Scale(3))
    report = app.run(timeout=TIMEOUT)
    assert report.balanced, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 2, 4, 5, 6, 7]
    assert report.errored == {"s0: worker died": 1}


def test_a_frame_sent_directly_past_its_timeout():
    app = App("direct-timeout")
    app.add("src", Ticks(6, 0.01))
    app.add("s0", Scale(2), executor="process")
    app.add("s1", Scale(3, hang_on={2}), executor="process", timeout=1.0)
    out = Collect()
    app.add("out", out)
    for a, b in [("src", "s0"), ("s0", "s1"), ("s1", "out")]:
        app.connect(a, b)
    report = app.run(timeout=TIMEOUT)
    assert report.balanced, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 3, 4, 5]
    assert report.errored == {"s1: timeout": 1}


def test_stop_while_a_producer_hangs_on_a_reserved_call():
    app, out = chain(Ticks(50, 0.01), Scale(2, hang_on={3}), Scale(3))
    t0 = time.monotonic()
    report = app.run(timeout=1.0, grace=0.5)
    assert time.monotonic() - t0 < 10
    assert report.stopped == "timeout after 1 s"
    assert report.balanced, report.accounting()
    assert [p.request_id for p in out.packets] == [0, 1, 2]


def test_a_directly_sent_call_is_timed_by_its_worker():
    # A call that came on a direct edge began before the app heard of it: its time (in the
    # report, and in the deployer's profiles) is the worker's own, not the app's wait. Here
    # the producer's answer comes late (a slow side output), long after the consumer's 1 ms.
    app = App("direct-timed")
    app.add("src", Ticks(8, 0.05))
    app.add("s0", SlowSide(ms=30), executor="process")
    app.add("s1", Sleep(ms=1), executor="process")
    side, out = Collect(), Collect()
    app.add("side", side)
    app.add("out", out)
    for a, b in [("src", "s0"), ("s0.out", "s1"), ("s0.side", "side"), ("s1", "out")]:
        app.connect(a, b)
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 8, report.accounting()
    s1 = row(report, "s1")
    assert s1["direct"] > 0 and 0.9 <= s1["p50_ms"] < 15, s1


def test_a_lone_frame_goes_direct_as_the_general_path_would_send_it():
    # _Forward.send's short way for {port: Frame} makes the message that output_packets and
    # encode make; any other output (two ports here) takes the general path.
    import pickle

    from tinydl.pipeline.packet import Frame, Packet
    from tinydl.pipeline.process import _Forward, encode, recv_msg
    from tinydl.pipeline.shm import Pool

    class Two(Scale):
        outputs = {"out": object, "side": object}

    pool = Pool(segment_prefix() + "test_", lends=True)
    reader, writer = multiprocessing.Pipe(duplex=False)
    forward = _Forward(Two(), "s0", pool, "out", "in", writer)
    try:
        image = pool.empty((270, 480, 3), np.uint8)
        image[...] = 7
        frame, current = Frame(image, "bgr", 0.5), Packet(None, 3, 9, 1234, "app")
        assert forward.send({"out": frame}, {}, (11, current), {})
        want = encode({"in": current.derive(frame)}, forward.arena, pool, False, {})
        assert pickle.loads(recv_msg(reader.fileno())) == ("process", want, [], None, 11, None)
        assert want[0] == 1 and want[1] == "in" and want[3:] == ("bgr", 0.5, 3, 9, 1234, "app")
        assert forward.send({"out": frame, "side": 1}, {"in": current}, 12, {})
        assert pickle.loads(recv_msg(reader.fileno())) == ("process", want, [], None, 12, None)
    finally:
        forward.arena.release()
        pool.close()
        reader.close()
        writer.close()
