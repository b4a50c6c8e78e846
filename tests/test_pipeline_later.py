"""Calls that finish later (`Later`, `in_flight`): a component enqueues work on a stand-in
device and returns; the framework finishes the call on a thread of its own while the next ones
are made, and the outputs still leave in call order with every frame accounted for."""

import numpy as np
import pytest
from helpers.pipeline import AsyncDouble, Count

from tinydl.pipeline import App, Component, ComponentRunner, Later, PipelineError, Tensor
from tinydl.pipeline.components import Batch, Collect
from tinydl.pipeline.config import load_app

TIMEOUT = 60


def _app(in_flight: int, n: int = 40, executor: str = "thread", **kw) -> tuple[App, Collect]:
    app = App("later")
    app.add("src", Count(n))
    app.add("gpu", AsyncDouble(**kw), in_flight=in_flight, executor=executor)
    out = Collect()
    app.add("out", out)
    app.connect("src", "gpu")
    app.connect("gpu", "out")
    return app, out


@pytest.mark.parametrize("in_flight", [1, 2, 3])
def test_calls_overlap_up_to_in_flight_and_leave_in_order(in_flight):
    app, out = _app(in_flight)
    gpu = app.components["gpu"].component
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and (report.frames_in, report.frames_out) == (40, 40)
    assert [int(p.payload.data[0]) for p in out.packets] == [2 * i for i in range(40)]
    assert [p.request_id for p in out.packets] == list(range(40))
    # The source is much faster than the device: the node keeps exactly in_flight calls going.
    assert gpu.outstanding == in_flight
    assert next(r["calls"] for r in report.components if r["component"] == "gpu") == 40


def test_a_finish_that_raises_errors_its_frames_only():
    app, out = _app(2, fail_at=7)
    report = app.run(timeout=TIMEOUT)
    assert report.balanced
    assert (report.frames_out, sum(report.errored.values())) == (39, 1)
    assert report.errored == {"gpu: ValueError": 1}
    assert [int(p.payload.data[0]) for p in out.packets] == [2 * i for i in range(40) if i != 7]


def test_a_stopped_app_still_accounts_for_outstanding_calls():
    app, out = _app(3, n=100_000, ms=20.0)
    report = app.run(timeout=0.5)
    assert report.balanced and report.stopped
    assert report.frames_out == len(out.packets) > 0
    assert [int(p.payload.data[0]) for p in out.packets] == [2 * i for i in range(len(out.packets))]


def test_a_worker_process_finishes_its_calls_itself():
    app, out = _app(2, n=12, executor="process")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 12
    assert [int(p.payload.data[0]) for p in out.packets] == [2 * i for i in range(12)]


def test_component_runner_finishes_at_once():
    got = ComponentRunner(AsyncDouble(ms=1.0)).run(
        {"in": [Tensor(np.array([i])) for i in range(5)]}
    )
    assert [int(p.payload.data[0]) for p in got["out"]] == [0, 2, 4, 6, 8]


def test_plain_outputs_wait_behind_outstanding_calls():
    """A call that answers at once (no Later) leaves after the calls made before it."""

    class Mixed(AsyncDouble):
        def process(self, ctx, inputs):
            if int(inputs["in"].payload.data[0]) % 3 == 0:
                return {"out": Tensor(inputs["in"].payload.data * 2)}
            return super().process(ctx, inputs)

    app = App("mixed")
    app.add("src", Count(30))
    app.add("gpu", Mixed(ms=2.0), in_flight=4)
    out = Collect()
    app.add("out", out)
    app.connect("src", "gpu")
    app.connect("gpu", "out")
    assert app.run(timeout=TIMEOUT).balanced
    assert [int(p.payload.data[0]) for p in out.packets] == [2 * i for i in range(30)]


@pytest.mark.parametrize(
    ("component", "kw", "message"),
    [
        (AsyncDouble(), {"in_flight": 0}, "in_flight must be a positive integer"),
        (AsyncDouble(), {"in_flight": 2, "timeout": 1.0}, "does not go with a timeout"),
        (Batch(4), {"in_flight": 2}, "does not go with a component that holds inputs"),
        (Count(3), {"in_flight": 2}, "does not go with a source"),
    ],
)
def test_in_flight_is_checked(component, kw, message):
    with pytest.raises(PipelineError, match=message):
        App("bad").add("x", component, **kw)


def test_in_flight_from_yaml(tmp_path):
    path = tmp_path / "app.yaml"
    path.write_text(
        "app: y\n"
        "components:\n"
        "  src: {type: SyntheticSource, options: {count: 3}}\n"
        "  sr: {type: Resize, options: {width: 8, height: 8}, in_flight: 2}\n"
        "connections:\n  - src -> sr\n"
    )
    app = load_app(path)
    assert app.components["sr"].in_flight == 2
    assert app.run(timeout=TIMEOUT).balanced


def test_later_is_a_component_api():
    class Half(Component):
        inputs = {"in": Tensor}
        outputs = {"out": Tensor}

        def process(self, ctx, inputs):
            x = inputs["in"].payload.data
            return Later(lambda: {"out": Tensor(x / 2)})

    got = ComponentRunner(Half()).run({"in": [Tensor(np.array([4.0]))]})
    assert float(got["out"][0].payload.data[0]) == 2.0


@pytest.mark.parametrize("backend", ["cpu", "webgpu"])
def test_inference_in_flight_gives_the_same_outputs(backend):
    """Inference with in_flight 2 enqueues the run and its copy to the host and answers later
    (a GPU backend copies asynchronously; others at once): the same tensors, in order."""
    from tinydl.backends import get_backend
    from tinydl.pipeline.components import Inference, SyntheticSource

    if not get_backend(backend).available():
        pytest.skip(get_backend(backend).unavailable_reason())
    results = []
    for in_flight in (1, 2):
        app = App(f"infer{in_flight}")
        app.add("src", SyntheticSource(count=6, width=24, height=16))
        app.add(
            "sr",
            Inference(model="tinydl:espcn_x2", backends=backend, channels=[0], output_as="tensor"),
            in_flight=in_flight,
        )
        out = Collect()
        app.add("out", out)
        app.connect("src", "sr")
        app.connect("sr", "out")
        report = app.run(timeout=TIMEOUT)
        assert report.balanced and report.frames_out == 6, report.errors
        results.append([p.payload.data for p in out.packets])
    assert [r.shape for r in results[1]] == [r.shape for r in results[0]]
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)
