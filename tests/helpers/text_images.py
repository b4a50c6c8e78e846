"""Images of text for the OCR tests and tools/bench_ocr.py: scikit-image's page, and pages rendered
with Pillow in varied fonts (its default, DejaVu as matplotlib ships it), sizes, on white, a
gradient and a photo (scikit-image's coffee), some slightly rotated. Also how two OCR results
are matched: by box overlap (IoU of the boxes' bounding rectangles) and equal text."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WORDS = (
    "tinydl reads text lines from images with a detector a classifier and a recognizer "
    "every frame keeps its own lines quick brown fox jumps over the lazy dog 2024 invoice "
    "total amount paid pipeline models batch queue stream GPU kernel tensor 42.50 EUR"
).split()


def _font(name: str | None, size: int):
    from PIL import ImageFont

    if name is None:
        return ImageFont.load_default(size)
    import matplotlib

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), size)


def _lines(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, int(rng.integers(3, 7)))) for _ in range(count)]


def _render(
    background: np.ndarray, font, lines: list[str], color, angle: float, fill
) -> np.ndarray:
    from PIL import Image, ImageDraw

    image = Image.fromarray(background)
    pen = ImageDraw.Draw(image)
    y = 20
    for line in lines:
        pen.text((24, y), line, font=font, fill=color)
        y += int(font.size * 1.8)
    if angle:
        image = image.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=fill)
    return np.asarray(image.convert("RGB"))


def text_images(seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """(name, RGB uint8 image) pairs: the page, then pages rendered in varied styles."""
    import skimage.data

    rng = np.random.default_rng(seed)
    page = np.repeat(skimage.data.page()[:, :, None], 3, axis=2)
    white = np.full((420, 760, 3), 255, np.uint8)
    ramp = np.linspace(200, 255, 760, dtype=np.float32)
    gradient = np.stack([np.broadcast_to(ramp, (420, 760))] * 3, axis=-1).astype(np.uint8)
    coffee = skimage.data.coffee()  # 400 x 600 photo
    return [
        ("page", page),
        ("sans", _render(white, _font("DejaVuSans.ttf", 26), _lines(rng, 6), "black", 0, "white")),
        (
            "serif_rotated",
            _render(
                gradient, _font("DejaVuSerif.ttf", 22), _lines(rng, 7), (20, 20, 90), 2.5, "white"
            ),
        ),
        (
            "default_font",
            _render(white, _font(None, 20), _lines(rng, 8), (60, 60, 60), -1.5, "white"),
        ),
        (
            "photo",
            _render(coffee, _font("DejaVuSans-Bold.ttf", 30), _lines(rng, 5), "white", 0, "black"),
        ),
        (
            "mono_small",
            _render(white, _font("DejaVuSansMono.ttf", 16), _lines(rng, 10), "black", 1.0, "white"),
        ),
    ]


def _rect(box) -> np.ndarray:
    p = np.asarray(box, np.float64).reshape(4, 2)
    return np.concatenate([p.min(axis=0), p.max(axis=0)])


def iou(a, b) -> float:
    """Intersection over union of the bounding rectangles of two quads."""
    ra, rb = _rect(a), _rect(b)
    lo, hi = np.maximum(ra[:2], rb[:2]), np.minimum(ra[2:], rb[2:])
    inter = np.prod(np.clip(hi - lo, 0, None))
    area = np.prod(ra[2:] - ra[:2]) + np.prod(rb[2:] - rb[:2]) - inter
    return float(inter / area) if area > 0 else 0.0


def matched(reference: list[dict], ours: list[dict], min_iou: float = 0.5) -> int:
    """How many reference lines have a line of ours with the same text and a box overlapping
    by min_iou or more (each of ours used once)."""
    free = list(range(len(ours)))
    count = 0
    for ref in reference:
        hit = next(
            (
                j
                for j in free
                if ours[j]["text"] == ref["text"] and iou(ours[j]["box"], ref["box"]) >= min_iou
            ),
            None,
        )
        if hit is not None:
            free.remove(hit)
            count += 1
    return count


def rapidocr_lines(engine, image: np.ndarray) -> list[dict]:
    """RapidOCR's lines for an RGB image (it takes arrays as BGR), in our JSON form."""
    result, _ = engine(np.ascontiguousarray(image[:, :, ::-1]))
    return [{"box": box, "text": text, "score": float(score)} for box, text, score in result or []]
