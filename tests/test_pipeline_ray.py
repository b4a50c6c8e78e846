"""The Ray executor on a local Ray (2 CPUs) and on a two-node cluster on this machine: a
4-stream app (the shape of examples/apps/superres4, with a resize standing in for the model)
with full accounting, resources and placement, and an actor killed mid-run."""

import os
import signal
import time
from pathlib import Path

import pytest
from helpers.pipeline import Pace, Ticks

from tinydl.pipeline import App, PipelineError
from tinydl.pipeline.components import (
    Collect,
    ColorConvert,
    GroupByRequest,
    Resize,
    SplitByFlow,
    SyntheticSource,
)
from tinydl.pipeline.deploy import manual_placement
from tinydl.pipeline.process import WorkerDied

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

TIMEOUT = 120
FRAMES = 5
# Ray's workers import the test helpers (components are pickled by reference) and tinydl.
TESTS = Path(__file__).resolve().parent
RUNTIME_ENV = {
    "env_vars": {
        "PYTHONPATH": os.pathsep.join(
            [str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]
        )
    }
}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=RUNTIME_ENV, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture()
def two_nodes():
    """Two Ray nodes of one CPU each on this machine (the last test of the module)."""
    ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def four_streams() -> tuple[App, list[Collect]]:
    app = App("superres4-ray", executor="ray", capacity=4)
    # Sources stay on threads: four fewer actors to start on a 2-core CI machine.
    src = SyntheticSource(count=FRAMES, width=32, height=24)
    app.add("src", src, instances=4, executor="thread")
    app.add("ycc", ColorConvert(to="ycbcr"))
    app.add("group", GroupByRequest(streams=4, max_wait=1.0))
    app.add("sr", Resize(width=64))
    app.add("rgb", ColorConvert(to="rgb"))
    app.add("split", SplitByFlow(flows=4))
    sinks = [Collect() for _ in range(4)]
    for i, sink in enumerate(sinks):
        app.add(f"save{i}", sink)
    for a, b in [("src", "ycc"), ("ycc", "group"), ("group", "sr"), ("sr", "rgb")]:
        app.connect(a, b)
    app.connect("rgb", "split")
    for i in range(4):
        app.connect(f"split.flow{i}", f"save{i}")
    return app, sinks


def check_four_streams(report, sinks) -> None:
    assert report.balanced and report.frames_in == 4 * FRAMES, report.accounting()
    assert report.frames_out == 4 * FRAMES, report.accounting()
    for flow, sink in enumerate(sinks):
        packets = sink.packets
        assert [p.request_id for p in packets] == list(range(FRAMES))
        assert {p.flow_id for p in packets} == {flow}
        frame = packets[-1].payload
        assert frame.image.shape == (48, 64, 3) and frame.format == "rgb"
        # SyntheticSource's pixel (0, 0) is the frame number; the round trip keeps it close.
        assert abs(int(frame.image[0, 0, 0]) - (FRAMES - 1)) <= 2
    rows = {r["component"]: r for r in report.components}
    assert rows["sr"]["executor"] == "ray" and rows["save0"]["executor"] == "thread"
    assert rows["sr"]["items"] == 4 * FRAMES
    # Between actors, frames go as object-store references, not through the driver.
    for name in ("group", "sr", "rgb", "split"):
        assert rows[name]["direct"] == rows[name]["calls"] > 0, rows[name]
    assert rows["ycc"]["direct"] == 0  # its producers are threads of the driver


def run_app(app):
    rt = app.start()
    if not rt.wait(TIMEOUT):
        rt.stop("timeout")
    return rt, rt.report(rt.join(5.0))


def test_four_streams_on_local_ray(local_ray):
    app, sinks = four_streams()
    assert "[ray]" in app.help(file=None)
    rt, report = run_app(app)
    check_four_streams(report, sinks)
    assert {n.pid for n in rt.nodes["sr"] + rt.nodes["group"]}.isdisjoint({os.getpid(), None})
    # Frames come back through the object store: read-only, zero-copy views.
    assert not sinks[0].packets[0].payload.image.flags.writeable


def test_a_source_paced_by_ticks_keeps_its_pace(local_ray):
    # The actor's context must not keep asking for a tick that has fired (it once did, and
    # the source ran with no pause).
    app = App("ticks", executor="ray")
    app.add("src", Ticks(6, 0.05))
    out = Collect()
    app.add("out", out)
    app.connect("src", "out")
    _, report = run_app(app)
    assert report.frames_out == 6, report.accounting()
    made = [int(p.payload.data[0]) for p in out.packets]
    assert min(b - a for a, b in zip(made[:-1], made[1:], strict=True)) >= 45e6, made


def test_killed_actor_is_reported_not_hung(local_ray):
    app = App("kill", executor="ray")
    app.add("src", SyntheticSource(count=40, fps=50, width=16, height=12), executor="thread")
    app.add("work", Pace(0.02))
    out = Collect()
    app.add("out", out)
    app.connect("src", "work")
    app.connect("work", "out")
    rt = app.start()
    worker = rt.nodes["work"][0]
    first_pid = worker.pid
    deadline = time.monotonic() + TIMEOUT
    while len(out.packets) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(first_pid, signal.SIGKILL)
    assert rt.wait(TIMEOUT), "the app hung after its actor was killed"
    report = rt.report(rt.join(5.0))
    assert report.balanced and report.frames_in == 40, report.accounting()
    assert report.errored.get("work: worker died", 0) >= 1, report.accounting()
    assert isinstance(report.exception, WorkerDied)
    assert worker.stats.restarts == 1 and worker.pid not in (None, first_pid)
    assert report.frames_out >= 30  # the restarted actor carried on


def place(app, cores: dict[str, list[int]]) -> None:
    """Each named component on its core(s), as a deployment plan places instances."""
    for name, cpus in cores.items():
        app.components[name].placement = manual_placement(name, 1, cpus, None)


def test_placement_the_cluster_cannot_hold_is_refused(local_ray):
    app, _ = four_streams()
    place(app, {"sr": [0], "ycc": [1], "rgb": [2]})
    with pytest.raises(PipelineError, match=r"boxes \(3 CPU, 0 GPU\): the cluster has 2 CPU"):
        app.run(timeout=TIMEOUT)
    app.placement_strategy = "EVERYWHERE"
    with pytest.raises(PipelineError, match="placement strategy must be one of"):
        app.run(timeout=TIMEOUT)


def test_four_streams_on_a_two_node_cluster(two_nodes):
    app, sinks = four_streams()
    app.ray = {"address": two_nodes.address, "runtime_env": RUNTIME_ENV}
    # One box per node: the colour converters share core 0, the model has core 1.
    place(app, {"ycc": [0], "rgb": [0], "sr": [1]})
    app.placement_strategy = "STRICT_SPREAD"
    rt, report = run_app(app)
    check_four_streams(report, sinks)
    nodes = {name: rt.nodes[name][0].node_id for name in ("ycc", "rgb", "sr")}
    assert nodes["ycc"] == nodes["rgb"] != nodes["sr"]
    assert len({n["NodeID"] for n in ray.nodes() if n["Alive"]}) == 2


def test_ray_settings_from_yaml(tmp_path):
    """`ray` (ray.init's arguments) and the placement keys the Ray executor turns into bundles."""
    from tinydl.pipeline.config import load_app

    path = tmp_path / "app.yaml"
    path.write_text(
        "app: cams\nexecutor: ray\nray: {address: auto}\n"
        "components:\n"
        "  cam: {type: SyntheticSource, options: {count: 2}}\n"
        "  small: {type: Resize, options: {width: 8}, cpus: [0], gpus: [cuda:0]}\n"
        "  out: {type: Collect}\n"
        "connections:\n  - cam -> small\n  - small -> out\n"
    )
    app = load_app(path)
    assert app.ray == {"address": "auto"}
    place = app.components["small"].placement
    assert [(p["cpus"], p["gpu"]) for p in place] == [([0], "cuda:0")]
    assert app.executor_of(app.components["out"]) == "thread"  # Collect stays in the driver
    assert "small" in app.help(file=None)
