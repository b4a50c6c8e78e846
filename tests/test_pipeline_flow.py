"""End-to-end flow control: a source's in-flight limit per stream keeps latency bounded when a
stage downstream is slower than the source, and every frame is still accounted for."""

import time

import pytest

from tinydl.pipeline import App, Component, Frame, PipelineError
from tinydl.pipeline.components import SyntheticSource
from tinydl.pipeline.config import load_app

TIMEOUT = 30
STAGE_S = 0.015  # the slow stage's time per frame; the source makes one every 5 ms


class Slow(Component):
    inputs = {"in": Frame}
    outputs = {"out": Frame}

    def process(self, ctx, inputs):
        time.sleep(STAGE_S)
        return {"out": inputs["in"].payload}


class Latency(Component):
    """Sink: end-to-end latency (now - the frame's entry time) and request ids, per frame."""

    inputs = {"in": Frame}
    outputs: dict = {}
    executors = ("thread",)

    def __init__(self):
        self.latency_s: list[float] = []
        self.requests: list[int] = []

    def process(self, ctx, inputs):
        packet = inputs["in"]
        self.latency_s.append((ctx.now_ns() - packet.timestamp) / 1e9)
        self.requests.append(packet.request_id)


def run(frames: int, **limit) -> tuple:
    app = App("flow", capacity=16)
    app.add("cam", SyntheticSource(count=frames, fps=200, width=32, height=24), **limit)
    app.add("slow", Slow())
    sink = Latency()
    app.add("out", sink)
    app.connect("cam", "slow")
    app.connect("slow", "out")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced, report.accounting()
    assert report.frames_in == frames, report.accounting()
    return report, sink


def p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def test_flow_limit_keeps_latency_bounded():
    free, free_sink = run(60)
    limited, limited_sink = run(60, flow_limit=2)
    assert free.frames_out == limited.frames_out == 60  # "wait" loses nothing
    assert limited.peak_in_flight <= 2 < free.peak_in_flight
    assert p50(limited_sink.latency_s) <= 4 * STAGE_S
    # Without the limit the frames queue up in front of the slow stage.
    assert p50(free_sink.latency_s) > 3 * p50(limited_sink.latency_s)
    row = next(r for r in limited.components if r["component"] == "cam")
    assert row["flow_wait_ms"] > 0


def test_flow_limit_drop_oldest_sheds_frames_and_accounts_them():
    report, sink = run(60, flow_limit=1, flow_policy="drop-oldest")
    dropped = report.dropped.get("flow limit (drop-oldest) on cam", 0)
    assert dropped > 0 and report.frames_out + dropped == 60, report.accounting()
    assert report.peak_in_flight <= 1
    assert sink.requests == sorted(sink.requests) and sink.requests[-1] == 59  # the last is kept
    assert p50(sink.latency_s) <= 4 * STAGE_S


def test_flow_limit_per_source_overrides_the_app(tmp_path):
    path = tmp_path / "app.yaml"
    path.write_text(
        "app: limited\nflow_limit: 3\n"
        "components:\n"
        "  a: {type: SyntheticSource, options: {count: 4}}\n"
        "  b: {type: SyntheticSource, options: {count: 4}, flow_limit: 1,\n"
        "      flow_policy: drop-oldest}\n"
        "  out: {type: Collect}\n"
        "connections:\n  - a, b -> out\n"
    )
    app = load_app(path)
    assert app.flow_limit_of(app.components["a"]) == (3, "wait")
    assert app.flow_limit_of(app.components["b"]) == (1, "drop-oldest")
    assert "flow limit 1 (drop-oldest)" in app.help(file=None)
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_in == 8, report.accounting()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"flow_limit": 0}, "flow_limit must be a positive integer, got 0"),
        ({"flow_limit": 2, "flow_policy": "drop-newest"}, "flow_policy must be one of"),
    ],
)
def test_flow_limit_errors(kwargs, message):
    with pytest.raises(PipelineError, match=message):
        App("bad", **kwargs)
    app = App("bad")
    app.add("cam", SyntheticSource(count=1))
    with pytest.raises(PipelineError, match="apply to sources only"):
        app.add("slow", Slow(), flow_limit=2)
