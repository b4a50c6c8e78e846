"""Image helpers shared by the image components: resize (tinydl's own Resize op reference),
crop, and color conversion through RGB (YCbCr is BT.601 full range, as JPEG and ESPCN use)."""

from __future__ import annotations

import numpy as np

from tinydl.pipeline.packet import COLOR_FORMATS

_TO_YCBCR = np.array(
    [[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]], np.float32
)
_FROM_YCBCR = np.array(
    [[1.0, 0.0, 1.402], [1.0, -0.344136, -0.714136], [1.0, 1.772, 0.0]], np.float32
)
RESIZE_MODES = ("nearest", "linear", "cubic")


def resize(image: np.ndarray, width: int, height: int, mode: str = "linear") -> np.ndarray:
    """Resize an HxW or HxWxC image (any dtype) with the ONNX Resize reference (half-pixel)."""
    if mode not in RESIZE_MODES:
        raise ValueError(f"resize mode must be one of {RESIZE_MODES}, got {mode!r}")
    if image.shape[:2] == (height, width):
        return image
    from tinydl.ops import schema_of

    schema = schema_of("Resize")
    attrs = {k: a.default for k, a in schema.attrs.items()} | {"mode": mode}
    sizes = np.array([height, width, *image.shape[2:]], np.int64)
    return schema.reference(image, None, None, sizes, **attrs)


def convert(image: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Convert between rgb, bgr, gray and ycbcr (uint8 in 0..255 or float in 0..1)."""
    for fmt in (src, dst):
        if fmt not in COLOR_FORMATS:
            raise ValueError(f"color format must be one of {COLOR_FORMATS}, got {fmt!r}")
    if src == dst:
        return image
    return _from_rgb(_to_rgb(image, src), dst)


def _offset(image: np.ndarray) -> float:
    return 128.0 if image.dtype == np.uint8 else 0.5


def _back(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    if like.dtype == np.uint8:
        return np.clip(np.rint(x), 0, 255).astype(np.uint8)
    return x.astype(like.dtype, copy=False)


def _to_rgb(image: np.ndarray, src: str) -> np.ndarray:
    if src == "rgb":
        return image
    if src == "bgr":
        return image[..., ::-1]
    if src == "gray":
        gray = image if image.ndim == 2 else image[..., 0]
        return np.repeat(gray[..., None], 3, axis=-1)
    ycc = image.astype(np.float32)
    ycc[..., 1:] -= _offset(image)
    return _back(ycc @ _FROM_YCBCR.T, image)


def _from_rgb(rgb: np.ndarray, dst: str) -> np.ndarray:
    if dst == "rgb":
        return rgb
    if dst == "bgr":
        return rgb[..., ::-1]
    if dst == "gray":
        return _back(rgb.astype(np.float32) @ _TO_YCBCR[0], rgb)
    ycc = rgb.astype(np.float32) @ _TO_YCBCR.T
    ycc[..., 1:] += _offset(rgb)
    return _back(ycc, rgb)
