"""Shards: an app run as k processes, each with its share of every component's instances; the
reports merge into one that accounts for every frame exactly once."""

import sys

import pytest
from helpers.pipeline import Count, ExitIn, Seen, Stamp

from tinydl.cli import main
from tinydl.pipeline import App, PipelineError
from tinydl.pipeline.components import GroupByRequest
from tinydl.pipeline.deploy import Deployment
from tinydl.pipeline.shards import shard

TIMEOUT = 120


def _app(streams: int = 4, n: int = 10, stages: int = 2, **stamp) -> App:
    app = App("sharded")
    app.add("src", Count(n), instances=streams)
    app.add("stamp", Stamp(**stamp), instances=stages, gpus=["cuda:0", "cuda:1"])
    app.add("out", Seen())
    app.connect("src", "stamp", dispatch="by_flow")
    app.connect("stamp", "out")
    return app


def test_each_shard_takes_every_kth_instance_and_keeps_its_index():
    app = _app(streams=5, stages=2)
    parts = [shard(app, i, 2) for i in range(2)]
    assert [p.components["src"].shard_of for p in parts] == [([0, 2, 4], 5), ([1, 3], 5)]
    assert [p.components["stamp"].shard_of for p in parts] == [([0], 2), ([1], 2)]
    assert [p.components["out"].shard_of for p in parts] == [([0], 1), ([0], 1)]  # copied
    assert app.components["src"].shard_of is None and app.components["src"].instances == 5


def test_a_sharded_run_accounts_for_every_frame_once():
    report = _app().run(timeout=TIMEOUT, shards=2)
    assert report.balanced and (report.frames_in, report.frames_out) == (40, 40)
    assert len(report.shards) == 2 and all(r.balanced for r in report.shards)
    assert [r.frames_out for r in report.shards] == [20, 20]
    sinks = report.parts["out"]
    assert [s.where for s in sinks] == [(0, None), (0, None)]
    flows = [sorted({f for f, _, _ in s.got}) for s in sinks]
    assert flows == [[0, 2], [1, 3]]  # the flow ids the whole app gives its sources
    for i, s in enumerate(sinks):  # each shard's stage is instance i, on GPU i
        want = sorted((f, r, r + 1100 * i) for f in flows[i] for r in range(10))
        assert sorted(s.got) == want
    names = {row["component"] for row in report.components}
    assert {"src[0]@0", "src[1]@1", "stamp[0]@0", "stamp[1]@1", "out@0", "out@1"} <= names


def test_errors_in_one_shard_are_counted_in_the_merged_report():
    report = _app(fail_on=3).run(timeout=TIMEOUT, shards=2)
    assert report.balanced and report.frames_in == 40
    assert report.errored == {"stamp[0]: ValueError": 2, "stamp[1]: ValueError": 2}
    assert report.frames_out == 36
    assert any(e.startswith("@0: ") for e in report.errors)
    assert report.exception is not None and report.exception.type_name == "ValueError"


def test_a_shard_that_dies_is_an_error_naming_it():
    app = App("dies")
    app.add("src", Count(5), instances=2)
    app.add("mid", ExitIn(instance=1), instances=2)
    app.add("out", Seen())
    app.connect("src", "mid")
    app.connect("mid", "out")
    with pytest.raises(PipelineError, match=r"shard 1 ended \(exit code 3\)"):
        app.run(timeout=TIMEOUT, shards=2)


def test_a_plan_with_shards_is_run_sharded(tmp_path):
    plan = Deployment("sharded", 40.0, 1.0, "manual", {}, shards=2)
    plan.to_json(tmp_path / "plan.json")
    loaded = Deployment.load(tmp_path / "plan.json")
    assert loaded.shards == 2
    report = _app().run(timeout=TIMEOUT, deployment=loaded)
    assert len(report.shards) == 2 and report.frames_out == 40
    assert report.deployment is loaded


def test_what_cannot_be_sharded_is_refused():
    named = _app()
    named.add("late", Seen())
    named.connect("stamp", "late")
    named.edges[-1].dst_instance = 0
    with pytest.raises(PipelineError, match="cannot address one instance"):
        named.run(shards=2)

    class Unpicklable(Seen):
        pass

    local = App("local")
    local.add("src", Count(2))
    local.add("out", Unpicklable())
    local.connect("src", "out")
    with pytest.raises(PipelineError, match="must pickle"):
        local.run(shards=2)
    grouped = App("grouped")
    grouped.add("src", Count(2), instances=2)
    grouped.add("group", GroupByRequest(streams=2))
    grouped.add("out", Seen())
    grouped.connect("src", "group")
    grouped.connect("group", "out")
    with pytest.raises(PipelineError, match=r"group \(GroupByRequest\) counts on every stream"):
        grouped.run(shards=2)
    ray = _app()
    ray.components["stamp"].executor = "ray"
    with pytest.raises(PipelineError, match="run a Ray app unsharded"):
        ray.run(shards=2)
    with pytest.raises(PipelineError, match="writes no trace"):
        _app().run(shards=2, trace="t.json")
    with pytest.raises(PipelineError, match="shards must be a positive integer"):
        _app().run(shards=0)


def test_cli_runs_an_app_sharded(tmp_path, capsys, monkeypatch):
    path = tmp_path / "app.yaml"
    path.write_text(
        "app: cli-shards\n"
        "components:\n"
        "  cam: {type: SyntheticSource, options: {count: 6, width: 16, height: 8}, instances: 4}\n"
        "  small: {type: Resize, options: {width: 8, height: 4}}\n"
        "  out: {type: Collect}\n"
        "connections:\n  - cam -> small\n  - small -> out\n"
    )
    monkeypatch.setattr(sys, "argv", ["tinydl"])
    assert main(["pipeline", "run", str(path), "--shards", "2"]) == 0
    text = capsys.readouterr().out
    assert "frames in 24 = out 24 + dropped 0 + errored 0" in text
