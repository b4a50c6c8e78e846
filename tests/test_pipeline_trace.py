"""The Perfetto trace: a flow arrow per frame from its source through each call to its sink,
and CPU utilization counters for the app, each worker process and the machine."""

import json
import os
from collections import defaultdict

from helpers.pipeline import Pace

from tinydl.pipeline import App
from tinydl.pipeline.components import Collect, SyntheticSource

TIMEOUT = 60
FRAMES = 12


def test_trace_has_frame_flows_and_cpu_counters(tmp_path):
    app = App("traced")
    app.add("cam", SyntheticSource(count=FRAMES, width=16, height=12))
    app.add("work", Pace(0.05), executor="process")  # 0.6 s of calls: several CPU samples
    app.add("out", Collect())
    app.connect("cam", "work")
    app.connect("work", "out")
    report = app.run(timeout=TIMEOUT, trace=str(tmp_path / "t.json"))
    assert report.balanced and report.frames_out == FRAMES, report.accounting()
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    by_frame = defaultdict(list)
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        if e.get("cat") == "frame":
            by_frame[e["id"]].append((e["ph"], tracks[(e["pid"], e["tid"])].split(" ")[0]))
    assert sorted(by_frame) == sorted(f"0:{i}" for i in range(FRAMES))
    for steps in by_frame.values():
        assert steps == [("s", "cam"), ("t", "work"), ("f", "out")]
    # Each flow event lies inside a span of its track (Perfetto binds it to that call).
    spans = [e for e in events if e["ph"] == "X"]
    for e in (e for e in events if e.get("cat") == "frame"):
        assert any(
            s["pid"] == e["pid"]
            and s["tid"] == e["tid"]
            and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
            for s in spans
        )
    counters = [e for e in events if e["ph"] == "C"]
    worker = next(p for p, _ in tracks if p != os.getpid())
    by_pid = defaultdict(list)
    for e in counters:
        by_pid[(e["pid"], e["name"])].append(next(iter(e["args"].values())))
    assert by_pid[(os.getpid(), "CPU %")] and by_pid[(worker, "CPU %")]
    machine = by_pid[(os.getpid(), "machine CPU %")]
    assert machine and all(0 <= v <= 100 for v in machine)
