"""The deployer: the formulas, every packing rule (fake GPU boxes: 1, 2 and 4 GPUs), the
simulation, the modes, applying a plan, and on this machine: a stage slower than the frame period
keeps up once deployed, and predictions match measurements at scale 0, 0.5 and 1."""

import json
import os
import re

import pytest
from helpers.pipeline import FakeGPU, Sleep

from tinydl.cli import main
from tinydl.pipeline import App, Component, Deployment, PipelineError, deploy, profile
from tinydl.pipeline.components import Batch, Collect, Metrics, SyntheticSource, Unbatch
from tinydl.pipeline.deploy import (
    Task,
    apply_plan,
    batch_for_scale,
    call_ms,
    instances_for,
    pack,
    profitable_sizes,
)
from tinydl.pipeline.profile import Profile, app_key, cache_path

pytest.importorskip("simpy", reason="pip install 'tinydl[pipeline]'")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(tmp_path / "cache"))


# -- formulas ----------------------------------------------------------------------------------


def _curve(a, b, sizes=(1, 2, 4, 8, 16)):
    return {str(k): {"ms": a + b * k, "cpu_ms": 0.1} for k in sizes}


def test_scale_maps_monotonically_onto_profitable_batches():
    curve = _curve(8.0, 1.0)  # per item: 9, 5, 3, 2, 1.5 — each step profitable
    assert profitable_sizes(curve) == [1, 2, 4, 8, 16]
    picks = [batch_for_scale(curve, s / 20) for s in range(21)]
    assert picks[0] == 1 and picks[-1] == 16
    assert picks == sorted(picks)
    assert batch_for_scale(curve, 0.5) == 4
    flat = {"1": {"ms": 1.0, "cpu_ms": 0}, "2": {"ms": 1.98, "cpu_ms": 0}, "4": {"ms": 3.9}}
    assert profitable_sizes(flat) == [1]  # 1 % per item is not worth the latency
    assert batch_for_scale(flat, 1.0) == 1
    assert batch_for_scale(None, 1.0) == 1
    # Measured on a GPU (ms per call): batch 8 no better per item than 4, but 16 is; 32 and
    # 64 gain under 5 % each. A step that gains nothing is skipped, not the end of the curve.
    noisy = {str(b): {"ms": ms} for b, ms in [(1, 0.27), (2, 0.51), (4, 0.86), (8, 1.72)]}
    noisy.update({"16": {"ms": 3.03}, "32": {"ms": 6.04}, "64": {"ms": 11.63}})
    assert profitable_sizes(noisy) == [1, 2, 4, 16]
    assert batch_for_scale(noisy, 1.0) == 16


def test_instance_formulas():
    assert instances_for(50.0, 25.0) == 2  # formula 1, exact multiple
    assert instances_for(50.1, 25.0) == 3
    assert instances_for(0.01, 25.0) == 1
    assert instances_for(20.0, 4 * 2.5) == 2  # formula 3: T(b) / (b T) with b=4, T=2.5


# -- packing rules -----------------------------------------------------------------------------


def _where(placed, name):
    return placed[name]["placement"]


def test_cpu_instances_go_to_different_boxes_and_as_few_boxes_as_possible():
    tasks = [Task("a", "cpu", 3, 2.0), Task("b", "cpu", 1, 1.0), Task("c", "cpu", 1, 0.5)]
    placed, boxes, warns = pack(tasks, [0, 1, 2, 3, 4, 5], [], 10.0)
    assert len(set(_where(placed, "a"))) == 3
    used = [b for b in boxes if b.tasks]
    assert len(used) == 3  # b and c join a's boxes instead of opening new ones
    assert not warns


def test_first_fit_takes_the_used_box_with_the_most_room():
    tasks = [Task("big", "cpu", 1, 6.0), Task("two", "cpu", 2, 2.0), Task("c", "cpu", 1, 1.0)]
    placed, boxes, _ = pack(tasks, [0, 1, 2], [], 10.0)
    assert _where(placed, "big") == [0]
    assert _where(placed, "two") == [0, 1]  # joins a used box, then apart from itself
    assert _where(placed, "c") == [1]  # the used box with more room (8 against 2)
    assert not boxes[2].tasks


def test_overflow_is_reported():
    placed, _, warns = pack([Task("hog", "cpu", 1, 15.0)], [0], [], 10.0)
    assert _where(placed, "hog") == [0]
    assert warns and "over capacity" in warns[0] and "hog" in warns[0]


@pytest.mark.parametrize("g", [1, 2, 4])
def test_gpu_boxes_cg_ct_and_transfers(g):
    gpus = [f"fake:{i}" for i in range(g)]
    cores = list(range(2 * g + 2))
    tasks = [
        Task("cpu", "cpu", 2, 1.0),
        Task("down", "transfer", g, 0.5, gpu_task="det"),
        Task("up", "transfer", g, 0.5, gpu_task="det"),
        Task("det", "gpu", g, 4.0, host_load=1.0),
        Task("rec", "gpu", 1, 2.0, host_load=0.5),
        Task("rec_up", "transfer", 1, 0.3, gpu_task="rec"),
    ]
    placed, boxes, warns = pack(tasks, cores, gpus, 10.0)
    kinds = {k: [b for b in boxes if b.kind == k] for k in ("GPU", "CG", "CT", "CC")}
    assert len(kinds["GPU"]) == len(kinds["CG"]) == len(kinds["CT"]) == g
    assert [b.id for b in kinds["CG"]] == cores[:g] and [b.id for b in kinds["CT"]] == cores[
        g : 2 * g
    ]
    # instances of one GPU task on different GPUs; its driving thread on that GPU's CG core
    assert sorted(_where(placed, "det")) == gpus
    cg = {b.gpu: b.id for b in kinds["CG"]}
    ct = {b.gpu: b.id for b in kinds["CT"]}
    for gpu, core in zip(_where(placed, "det"), placed["det"]["cores"], strict=True):
        assert core == cg[gpu]
    # each transfer instance on the CT box of its GPU task's instance: apart from the GPU
    # task's CG box, and the transfers of one GPU's tasks together in one box
    for name, task in (("up", "det"), ("down", "det"), ("rec_up", "rec")):
        for i, core in enumerate(_where(placed, name)):
            gpu = _where(placed, task)[i]
            assert core == ct[gpu] and core != cg[gpu]
    rec_gpu = _where(placed, "rec")[0]
    together = {t for t, _ in next(b for b in kinds["CT"] if b.gpu == rec_gpu).tasks}
    assert "rec_up" in together and "up" in together
    assert not warns


def test_gpu_tasks_are_placed_before_cpu_tasks():
    # A CPU task big enough to fill the only CG core if it went first; it comes last instead.
    tasks = [Task("cpu", "cpu", 1, 9.0), Task("gpu", "gpu", 1, 5.0, host_load=5.0)]
    placed, boxes, warns = pack(tasks, [0, 1, 2], ["fake:0"], 10.0)
    assert placed["gpu"]["cores"] == [0]
    assert _where(placed, "cpu") == [2]  # CC first: the CG box keeps its room
    assert not warns


def test_one_gpu_shares_instances_and_cores_must_suffice():
    placed, _, _ = pack([Task("g", "gpu", 3, 2.0, 0.1)], [0, 1], ["fake:0"], 10.0)
    assert _where(placed, "g") == ["fake:0"] * 3  # no other box: they share the one GPU
    with pytest.raises(PipelineError, match="need at least 4 cores"):
        pack([], [0, 1, 2], ["fake:0", "fake:1"], 10.0)


def test_pinned_placement_is_loaded_first():
    tasks = [Task("p", "cpu", 1, 8.0), Task("q", "cpu", 1, 5.0)]
    placed, _, _ = pack(tasks, [0, 1], [], 10.0, pinned={"p": [1]})
    assert _where(placed, "p") == [1] and _where(placed, "q") == [0]
    with pytest.raises(PipelineError, match="not one of"):
        pack(tasks, [0, 1], [], 10.0, pinned={"p": [7]})


# -- apps on this machine ------------------------------------------------------------------------


def batched_app(frames=160, fps=80):
    app = App("batched")
    app.add("cam", SyntheticSource(count=frames, fps=fps, width=16, height=8))
    app.add("pre", Sleep(ms=18))
    app.add("batch", Batch(max_size=1, max_wait=0.05))
    app.add("gpu", FakeGPU(a_ms=4, b_ms=1))
    app.add("unbatch", Unbatch())
    app.add("metrics", Metrics())
    app.add("out", Collect())
    for a, b in [
        ("cam", "pre"),
        ("pre", "batch"),
        ("batch", "gpu"),
        ("gpu", "unbatch"),
        ("unbatch", "metrics"),
        ("metrics", "out"),
    ]:
        app.connect(a, b)
    return app


@pytest.fixture(scope="module")
def batched_profile(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYDL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return profile(batched_app(), duration=1.5, max_batch=16, cache=False)


def test_profile_measures_resources_times_and_curves(batched_profile):
    c = batched_profile.components
    assert c["gpu"]["resource"] == "gpu" and c["pre"]["resource"] == "cpu"
    assert c["pre"]["ms_per_item"] == pytest.approx(18, rel=0.25)
    assert c["pre"]["cpu_ms_per_item"] < 0.5 * c["pre"]["ms_per_item"]  # sleeping is no CPU
    assert c["gpu"]["batch_via"] == "batch"
    curve = {int(b): v["ms"] for b, v in c["gpu"]["curve"].items()}
    assert sorted(curve) == [1, 2, 4, 8, 16]
    assert curve[16] == pytest.approx(4 + 16, rel=0.25)
    assert curve[1] < curve[4] < curve[16]
    assert c["cam"]["source"] and c["out"]["sink"]


def test_profile_is_cached_by_app_and_machine(tmp_path):
    path = tmp_path / "app.yaml"
    path.write_text(
        "app: cached\ncomponents:\n  cam: {type: SyntheticSource, options: {count: 5}}\n"
        "  out: {type: Collect}\nconnections: [cam -> out]\n"
    )
    app = App.load(str(path))
    first = profile(app, duration=1)
    assert cache_path(app).exists()
    cache_path(app).write_text(json.dumps({**first.data, "duration_s": -1.0}))
    assert profile(App.load(str(path)), duration=1).data["duration_s"] == -1.0  # read back
    path.write_text(path.read_text().replace("count: 5", "count: 6"))
    assert app_key(App.load(str(path))) != first.data["app_key"]


@pytest.mark.parametrize("scale", [0, 0.5, 1])
def test_predicted_matches_measured(batched_profile, scale):
    app = batched_app()
    plan = deploy(app, rate=80, scale=scale, cores=2, profile=batched_profile)
    assert plan.components["pre"]["instances"] == 2  # 18 ms at a 12.5 ms period
    report = app.run(deployment=plan, timeout=60)
    assert report.balanced and report.frames_out == report.frames_in == 160
    measured_fps = report.frames_out / report.wall_s
    p50 = app.components["metrics"].component.summary()[0]["latency_p50_ms"]
    predicted = plan.predicted
    assert predicted["throughput_fps"] == pytest.approx(measured_fps, rel=0.15)
    # Latency on a machine shared with other tests: threads wake late. The 15 % figure is
    # tools/bench_deploy.py's on an idle machine; here a wrong model (2x off) must still fail.
    assert predicted["latency_ms"]["p50"] == pytest.approx(p50, rel=0.35)


def test_batch_grows_with_scale(batched_profile):
    batches = [
        deploy(batched_app(), 80, scale=s, cores=2, profile=batched_profile).components["gpu"][
            "batch"
        ]
        for s in (0, 0.5, 1)
    ]
    assert batches[0] == 1 and batches == sorted(batches) and batches[2] > batches[0]


def test_a_stage_slower_than_the_period_keeps_up_once_deployed():
    def make():
        app = App("slow")
        app.add("cam", SyntheticSource(count=120, fps=40, width=16, height=8))
        app.add("slow", Sleep(ms=50))
        app.add("metrics", Metrics())
        app.add("out", Collect())
        app.connect("cam", "slow")
        app.connect("slow", "metrics")
        app.connect("metrics", "out")
        return app

    bare = make().run(timeout=60)
    assert bare.frames_out / bare.wall_s < 0.6 * 40  # one instance does 20 frames/s
    app = make()
    plan = deploy(app, rate=40, scale=0, cores=2, profile=profile(make(), duration=1.0))
    assert plan.components["slow"]["instances"] >= 2
    report = app.run(deployment=plan, timeout=60)
    assert report.balanced and report.frames_out == report.frames_in == 120
    assert report.frames_out / report.wall_s >= 0.9 * 40
    assert report.deployment is plan


def test_semi_automatic_pins_a_component_and_the_rest_adapts(batched_profile):
    auto = deploy(batched_app(), 80, scale=0.5, cores=2, profile=batched_profile)
    semi = deploy(
        batched_app(),
        80,
        scale=0.5,
        cores=2,
        profile=batched_profile,
        mode="semi",
        pin={"gpu": {"batch": 16, "instances": 1, "placement": ["gpu:0"]}, "pre": {"instances": 3}},
    )
    assert semi.components["gpu"]["batch"] == 16 != auto.components["gpu"]["batch"]
    assert semi.components["pre"]["instances"] == 3
    # the rest is still planned from the profile, and the simulation sees the bigger batch
    assert semi.components["unbatch"]["instances"] == auto.components["unbatch"]["instances"]
    assert semi.predicted["latency_ms"]["p50"] > auto.predicted["latency_ms"]["p50"]


def test_manual_mode_keeps_the_apps_own_choices(batched_profile):
    app = batched_app()
    app.expand("pre", 4)
    app.components["batch"].component.max_size = 2
    plan = deploy(app, 80, cores=2, profile=batched_profile, mode="manual")
    assert plan.components["pre"]["instances"] == 4 and plan.components["gpu"]["batch"] == 2


def test_slo_search_and_an_impossible_slo(batched_profile):
    plan = deploy(batched_app(), 80, scale=1, cores=2, profile=batched_profile, slo_ms=40)
    assert plan.slo_met and plan.predicted["latency_ms"]["p99"] <= 40
    assert plan.components["gpu"]["batch"] < 16
    hopeless = deploy(batched_app(), 80, scale=1, cores=2, profile=batched_profile, slo_ms=5)
    assert hopeless.slo_met is False
    assert any("no plan meets" in w for w in hopeless.warnings)


def test_simulation_counts_drops_and_a_bottleneck(batched_profile):
    app = App("drop")
    app.add("cam", SyntheticSource(count=100, fps=100))
    app.add("slow", Sleep(ms=20))
    app.add("out", Collect())
    app.connect("cam", "slow", policy="drop-oldest", capacity=2)
    app.connect("slow", "out")
    prof = Profile(
        {
            "components": {
                "cam": _entry(0.01, source=True),
                "slow": _entry(20.0),
                "out": _entry(0.01, sink=True),
            }
        }
    )
    plan = deploy(app, 100, cores=2, profile=prof, mode="manual")
    p = plan.predicted
    assert p["frames_in"] == 100 and p["frames_out"] + p["dropped"] == 100
    assert p["dropped"] > 40 and p["throughput_fps"] == pytest.approx(50, rel=0.1)
    assert "queue full (drop-oldest) on cam.out -> slow.in" in p["drops"]


def _entry(ms, source=False, sink=False):
    return {
        "type": "X",
        "resource": "cpu",
        "backend": None,
        "instances": 1,
        "source": source,
        "sink": sink,
        "holds_inputs": False,
        "executors": ["thread", "process"],
        "ms_per_item": ms,
        "cpu_ms_per_item": ms / 10,
        "batch_via": None,
        "curve": None,
    }


class Where(Component):
    """Records the cores its thread may run on, and its GPU."""

    seen: list = []

    def process(self, ctx, inputs):
        Where.seen.append((sorted(os.sched_getaffinity(0)), ctx.gpu))
        return {"out": inputs["in"].payload}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_apply_sets_instances_batches_affinity_and_collect(batched_profile):
    app = batched_app(frames=20)
    plan = deploy(app, 80, scale=1, cores=2, profile=batched_profile)
    apply_plan(app, plan)
    assert app.components["pre"].instances == plan.components["pre"]["instances"]
    assert app.components["batch"].component.max_size == plan.components["gpu"]["batch"]
    assert app.components["batch"].component.clone().max_size == plan.components["gpu"]["batch"]
    assert [e.collect for e in app.edges if e.src == "pre"] == [True]  # order kept per flow
    core = os.sched_getaffinity(0)
    first = min(core)
    Where.seen = []
    pinned = App("pinned")
    pinned.add("cam", SyntheticSource(count=30))  # light: would run inline were it not pinned
    pinned.add("w", Where(), cpus=[first], gpus=["cuda:0"])
    pinned.add("out", Collect())
    pinned.connect("cam", "w")
    pinned.connect("w", "out")
    assert pinned.run(timeout=30, grace=5).balanced
    assert Where.seen == [([first], "cuda:0")] * 30
    assert os.sched_getaffinity(0) == core  # the app's own threads are untouched


def test_plan_json_round_trip_and_table(tmp_path, batched_profile):
    plan = deploy(batched_app(), 80, scale=0.5, cores=2, profile=batched_profile)
    plan.to_json(tmp_path / "plan.json")
    back = Deployment.load(tmp_path / "plan.json")
    assert back.components == plan.components and back.predicted == plan.predicted
    text = str(back)
    assert "frames/s" in text and "gpu:0" in text
    assert back.table().row_count == len(plan.components)
    with pytest.raises(PipelineError, match="other components"):
        App("x").run(deployment=back)


def test_cli_deploy_then_run(tmp_path, capsys):
    app = tmp_path / "app.yaml"
    app.write_text(
        "app: slow\nvars: {fps: 40, streams: 1}\ncomponents:\n"
        "  cam: {type: SyntheticSource, options: {count: 60, fps: '${fps}', width: 16, "
        "height: 8}, instances: '${streams}'}\n"
        "  slow: {type: 'helpers.pipeline:Sleep', options: {ms: 50}}\n"
        "  metrics: {type: Metrics}\n  out: {type: Collect, cpus: [0]}\n"
        "connections: [cam -> slow, slow -> metrics, metrics -> out]\n"
    )
    plan = tmp_path / "plan.json"
    assert main(["pipeline", "profile", str(app), "--duration", "1"]) == 0
    assert "slow" in capsys.readouterr().out
    assert (
        main(["pipeline", "deploy", str(app), "--fps", "40", "--cores", "0-1", "--json", str(plan)])
        == 0
    )
    out = capsys.readouterr().out
    assert "predicted" in out and plan.exists()
    assert json.loads(plan.read_text())["components"]["slow"]["instances"] >= 2
    assert main(["pipeline", "run", str(app), "--fps", "40", "--deploy", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "frames in 60 = out 60" in out


def test_two_gpu_plan_keeps_inference_threads_and_moves_others_to_processes(monkeypatch):
    """Inference compiles on ctx.gpu itself (one process, a context per device); a component
    that does not gets a worker process per GPU (TINYDL_CUDA_DEVICE)."""
    import tinydl
    from tinydl.pipeline.components import Inference

    app = App("two")
    app.add("cam", SyntheticSource(count=4))
    app.add("sr", Inference(model="tinydl:espcn_x2", backends="cuda,cpu"))
    app.add("gpu", FakeGPU())
    app.connect("cam", "sr")
    app.connect("sr", "gpu")
    entry = {"resource": "gpu", "instances": 2, "batch": 1, "cores": None}
    plan = Deployment(
        "two",
        30.0,
        1.0,
        "auto",
        {
            "cam": {"resource": "cpu", "instances": 1, "batch": None, "placement": [0]},
            "sr": {**entry, "placement": ["cuda:0", "cuda:1"]},
            "gpu": {**entry, "placement": ["cuda:0", "cuda:1"]},
        },
    )
    notes = apply_plan(app, plan)
    assert app.executor_of(app.components["sr"]) == "thread"
    assert [p["gpu"] for p in app.components["sr"].placement] == ["cuda:0", "cuda:1"]
    assert app.executor_of(app.components["gpu"]) == "process"
    assert [p["env"] for p in app.components["gpu"].placement] == [
        {"TINYDL_CUDA_DEVICE": "0"},
        {"TINYDL_CUDA_DEVICE": "1"},
    ]
    assert notes == ["gpu: runs as processes, one per GPU context (['cuda:0', 'cuda:1'])"]

    # Inference's session is compiled on the instance's GPU when its backends name that GPU's.
    seen = []
    monkeypatch.setattr(tinydl, "compile", lambda model, **kw: seen.append(kw["device"]))
    from tinydl.pipeline.components.inference import open_session

    open_session("tinydl:espcn_x2", "cuda,cpu", "fp32", False, "cuda:1")
    open_session("tinydl:espcn_x2", ["webgpu"], "fp32", False, "cuda:1")
    open_session("tinydl:espcn_x2", "cpu", "fp32", False, None)
    assert seen == ["cuda:1", None, None]


def test_bench_multistream_runs_on_the_cpu_and_accounts_for_every_frame(tmp_path):
    """tools/bench_multistream.py end to end on the cpu backend: the app deployed over two
    (planned) GPUs at scale 0 and 1 keeps up with 4 streams and loses no frame."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    rows = tmp_path / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, str(root / "tools" / "bench_multistream.py"), "--backend", "cpu",
         "--precision", "fp32", "--streams", "4", "--width", "32", "--height", "18",
         "--seconds", "3", "--warmup", "1", "--max-batch", "4", "--profile-s", "1",
         "--scales", "0,1", "--gpus", "cuda:0,cuda:1", "--cores", "0-3", "--json", str(rows)],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "TINYDL_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [r["scale"] for r in got] == [0.0, 1.0]
    for r in got:
        assert r["balanced"] and r["frames_in"] == r["frames_out"] == 4 * 90
        assert r["errored"] == 0 and r["dropped"] == 0
        assert r["fps"] == pytest.approx(120, rel=0.25)
        assert set(r["placement"]) <= {"cuda:0", "cuda:1"}
    assert "bare session" in done.stdout and "streams" in done.stdout


def test_cpu_time_of_a_thread_that_has_ended_is_none():
    """Profiling samples every node's thread, some of them ended already: an ended thread
    reads as gone (its pthread clock would be a dangling handle that crashed the process)."""
    import threading

    from tinydl.pipeline.profile import _thread_cpu_ns

    spin = threading.Thread(target=lambda: sum(range(200_000)))
    spin.start()
    spin.join()
    assert _thread_cpu_ns(spin) is None
    me = _thread_cpu_ns(threading.current_thread())
    assert me is not None and me > 0


def _unsimulated(prof, rate, gpus, scale=0.0, **kw):
    """A plan of batched_app on 16 cores and these GPUs, not simulated."""
    return deploy(
        batched_app(), rate, scale=scale, cores=16, gpus=gpus, profile=prof, simulate=False, **kw
    )


def test_a_gpu_task_takes_the_smallest_batch_its_gpus_can_carry(batched_profile):
    """At 400 frames/s batch 1 needs two or more instances of the 5 ms GPU stage; instances
    that share a GPU add no GPU time, so the plan takes the smallest profitable batch that as
    many instances as there are GPUs carry."""
    c = batched_profile.components["gpu"]
    period = 1000.0 / 400

    def need(b):
        return instances_for(call_ms(c, b), b * period)

    def got(plan):
        return plan.components["gpu"]["batch"], plan.components["gpu"]["instances"]

    assert need(1) >= 2
    for gpus in (["gpu:0"], ["gpu:0", "gpu:1"]):
        plan = _unsimulated(batched_profile, 400, gpus)
        want = next(b for b in profitable_sizes(c["curve"]) if need(b) <= len(gpus))
        assert got(plan) == (want, need(want))
        if want > 1:
            assert any(
                re.fullmatch(
                    rf"gpu: batch 1 needs \d+ instances for 400 frames/s on "
                    rf"{len(gpus)} GPU\(s\); batch {want} needs \d+",
                    w,
                )
                for w in plan.warnings
            )
    batch, instances = got(_unsimulated(batched_profile, 400, ["gpu:0"]))
    assert batch > 1 and instances == 1
    pinned = _unsimulated(batched_profile, 400, ["gpu:0"], pin={"gpu": {"batch": 1}})
    assert got(pinned) == (1, need(1))


def test_shards_round_gpu_instances_up_and_travel_with_the_plan(batched_profile, tmp_path):
    two = ["gpu:0", "gpu:1"]
    plan = _unsimulated(batched_profile, 80, two, scale=1, shards=3)
    assert plan.shards == 3 and plan.components["gpu"]["instances"] % 3 == 0
    assert "3 shards" in str(plan)
    plan.to_json(tmp_path / "p.json")
    assert Deployment.load(tmp_path / "p.json").shards == 3
    pinned = _unsimulated(
        batched_profile, 80, two, scale=1, shards=2, pin={"gpu": {"instances": 1}}
    )
    assert pinned.components["gpu"]["instances"] == 1
    assert any("copied into shards that share a GPU: gpu (1)" in w for w in pinned.warnings)
    with pytest.raises(PipelineError, match="shards must be a positive integer"):
        _unsimulated(batched_profile, 80, two, shards=0)


def test_a_sharded_plan_is_simulated_shard_by_shard():
    app = App("streams")
    app.add("cam", SyntheticSource(count=40, fps=20, width=16, height=8), instances=4)
    app.add("slow", Sleep(ms=30))
    app.add("out", Collect())
    app.connect("cam", "slow")
    app.connect("slow", "out")
    prof = Profile(
        {
            "components": {
                "cam": {**_entry(0.01, source=True), "instances": 4},
                "slow": _entry(30.0),
                "out": _entry(0.01, sink=True),
            }
        }
    )
    whole = deploy(app, 80, cores=8, profile=prof, mode="manual")
    sharded = deploy(app, 80, cores=8, profile=prof, mode="manual", shards=2)
    # One 30 ms instance carries 33 frames/s; each shard has its own copy of it.
    assert whole.predicted["throughput_fps"] == pytest.approx(33.3, rel=0.1)
    assert sharded.predicted["throughput_fps"] == pytest.approx(66.7, rel=0.1)
    assert sharded.predicted["shards"] == 2 and sharded.predicted["input_fps"] == 80
    assert sharded.predicted["frames_in"] == pytest.approx(whole.predicted["frames_in"], rel=0.05)
