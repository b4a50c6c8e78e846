"""OCR with PP-OCRv4 (the models rapidocr-onnxruntime ships): text lines of images, as JSON.

    from tinydl.apps.ocr import read_text
    for page in read_text(["scan.png"], backends="cpu"):
        print(page["image"], [line["text"] for line in page["lines"]])

`ocr_app` builds it as a pipeline app (examples/apps/ocr.yaml is the same app as a file):

    src (ImageSource) ─┬─ det (Inference: PP-OCR det, BGR, short side 736, x32, mean/std 0.5)
                       │     └─ boxes (TextBoxes: DB post-processing, boxes in image pixels)
                       ├──────────── crops (CropBoxes: each image with its boxes)
                       │               └─ group (Batch: the crops of up to 4 images together)
                       │                    └─ upright (TextDirection: cut, 0/180 classifier)
                       │                         └─ read (TextRecognize: cut, CTC greedy decode)
                       │                              └─ lines (Unbatch: each image its lines)
                       │                                   ├─ out (LinesJson)
                       └──────────────────────────── draw (Draw, with annotate) ─ drawn (Collect)

Its steps and defaults are RapidOCR 1.4.4's (`RapidOCR()` as it comes), so both read the same
lines. `crops` says where the lines are cut out for the classifier and recognizer: "host"
(OpenCV, as RapidOCR), "device" (tinydl.Warp inside their sessions: on a GPU backend the frame is
uploaded once and the crops never leave the device), "auto" (device on a GPU backend).
Not reproduced: RapidOCR's pre-scaling of images over 2000 or under 30 pixels a side and
its padding of images 30 pixels high or less, or wider than 8:1, before detection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinydl.errors import InvalidInputError

# RapidOCR's text detector input: short side up to 736, both sides multiples of 32.
DET_RESIZE = "multiple 32 min 736"


def ocr_app(
    paths: list[str],
    backends: str = "cpu",
    json_path: str | None = None,
    annotate: bool = False,
    group: int = 4,
    models: dict[str, Any] | None = None,
    repeat: int = 1,
    crops: str = "auto",
    streams: int = 1,
):
    """The app that reads the text of `paths` (`repeat` times), and its sinks: (app, lines,
    drawn) where lines is the LinesJson sink and drawn the Collect of annotated frames (None
    without annotate). `models` may give "det", "cls", "rec" as paths or compiled Sessions
    (default: "ppocr:NAME"; `ocr_sessions` compiles them once). `streams` sources read the
    images, each its own flow (a multi-stream load)."""
    models = {k: f"ppocr:{k}" for k in ("det", "cls", "rec")} | (models or {})
    from tinydl.pipeline import App
    from tinydl.pipeline.components import (
        Batch,
        Collect,
        CropBoxes,
        Draw,
        ImageSource,
        Inference,
        LinesJson,
        TextBoxes,
        TextDirection,
        TextRecognize,
        Unbatch,
    )

    app = App("ocr", capacity=4, stop_on_error=True)
    app.add("src", ImageSource(list(paths), repeat=repeat), instances=streams)
    app.add(
        "det",
        Inference(
            model=models["det"],
            backends=backends,
            resize=DET_RESIZE,
            color="bgr",
            mean=0.5,
            std=0.5,
        ),
    )
    app.add("boxes", TextBoxes())
    app.add("crops", CropBoxes())
    app.add("group", Batch(max_size=group, max_wait=0))
    app.add("upright", TextDirection(models["cls"], backends=backends, crops=crops))
    app.add("read", TextRecognize(models["rec"], backends=backends, crops=crops))
    app.add("lines", Unbatch())
    lines = LinesJson(path=json_path, names=[str(p) for p in paths])
    app.add("out", lines)
    sources = ["det", "boxes.image", "crops.image"]
    drawn = None
    if annotate:
        drawn = Collect()
        app.add("draw", Draw(color=(255, 0, 0)))
        app.add("drawn", drawn)
        sources.append("draw.image")
    app.connect("src", sources)
    app.connect("det", "boxes.in")
    app.connect("boxes", "crops.boxes")
    app.connect("crops", "group")
    app.connect("group", "upright")
    app.connect("upright", "read")
    app.connect("read", "lines")
    app.connect("lines", ["out", "draw.overlay"] if annotate else "out")
    if annotate:
        app.connect("draw", "drawn")
    return app, lines, drawn


def ocr_sessions(backends: str = "cpu", crops: str = "auto", precision: str = "fp32") -> dict:
    """PP-OCRv4's det, cls and rec compiled once, for `ocr_app(models=...)` (many apps, or
    many runs, one compile): cls and rec behind their crop steps when crops are cut on the
    device ("device", or "auto" with a GPU backend first)."""
    import tinydl
    from tinydl.pipeline.components.inference import resolve_model
    from tinydl.pipeline.components.ocr import crop_graph
    from tinydl.pipeline.profile import GPU_BACKENDS, backend_names

    if crops not in ("auto", "host", "device"):
        raise InvalidInputError(f"crops is auto, host or device, got {crops!r}")
    names = backend_names(backends)
    device = crops == "device" or (crops == "auto" and bool(names) and names[0] in GPU_BACKENDS)
    sessions = {}
    for name in ("det", "cls", "rec"):
        model = resolve_model(f"ppocr:{name}")
        if device and name != "det":
            model = crop_graph(model, 48)
        sessions[name] = tinydl.compile(model, backends=backends, precision=precision)
    return sessions


def check_images(paths: list[str]) -> None:
    """An InvalidInputError naming the first path that is not a readable image."""
    from PIL import Image, UnidentifiedImageError

    for path in paths:
        try:
            with Image.open(path) as image:
                image.verify()
        except FileNotFoundError:
            raise InvalidInputError(f"{path}: no such file") from None
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise InvalidInputError(f"{path}: not a readable image ({exc})") from None


def read_text(
    paths: list[str | Path],
    backends: str = "cpu",
    json_path: str | None = None,
    annotate: bool = False,
    crops: str = "auto",
) -> Any:
    """The lines of each image, in input order: [{"image": path, "lines": [{"box": [[x, y] x 4],
    "text": str, "score": float}]}]; with annotate, (results, drawn frames) in the same order.
    An image without text has no lines; an unreadable one is an InvalidInputError."""
    names = [str(p) for p in paths]
    check_images(names)
    app, lines, drawn = ocr_app(names, backends, None, annotate, crops=crops)
    report = app.run()
    if report.exception is not None:
        raise report.exception
    if report.errored or not report.balanced:
        raise InvalidInputError(f"ocr: not every image was read\n{report}")
    results = [{"image": r["image"], "lines": r["lines"]} for r in lines.results]
    if json_path is not None:
        import json

        Path(json_path).write_text(json.dumps(results, ensure_ascii=False, indent=1))
    if not annotate:
        return results
    frames = [p.payload for p in sorted(drawn.packets, key=lambda p: p.key)]
    return results, frames
