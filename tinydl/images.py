"""Images <-> tensors: the one place pixels are read from files and turned into model inputs and
back. Used by `tinydl run` (an image file as an input), the pipeline's `Inference` and
`ImageSource` components, and `tinydl superres`.

    rgb = read_image("cat.png")                      # (H, W, 3) uint8, RGB
    x = image_to_tensor(rgb[None])                   # (1, 3, H, W) float32 in [0, 1]
    x = image_to_tensor(rgb, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))  # (3, H, W)
    back = tensor_to_image(x)                        # (H, W, 3) uint8 again

Conventions: an image is channels-last, (H, W, C) or a batch (N, H, W, C) (a 2-D (H, W) image
is one channel); uint8 pixels are 0..255, float pixels 0..1. A tensor is channels-first (NCHW:
(C, H, W) or (N, C, H, W)) or, with layout="NHWC", keeps the image's axes. uint8 pixels become
x / 255, then (x - mean) / std per channel when mean/std are given; the reverse undoes both,
clips to 0..1 and rounds to the nearest level (half to even). The rank is kept: add a batch
axis with `[None]`.

Only NumPy is needed; reading files needs Pillow (`pip install 'tinydl[image]'`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from tinydl.errors import InvalidInputError

LAYOUTS = ("NCHW", "NHWC")
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _eight_bit(image, Image):
    """16-bit and 32-bit integer or float images scaled to 8 bits by their range, not clipped:
    Pillow's own conversion saturates 16-bit gray (mid-grey becomes white) and truncates float
    images in 0..1 to black."""
    if image.mode not in ("I;16", "I;16B", "I;16L", "I", "F"):
        return image
    pixels = np.asarray(image, dtype=np.float64)
    if image.mode.startswith("I;16"):
        scaled = pixels / 257.0  # 0..65535 -> 0..255
    elif image.mode == "F" and pixels.size and np.nanmax(pixels) <= 1.0:
        scaled = pixels * 255.0  # a float image in 0..1
    elif image.mode == "I" and pixels.size and pixels.max() > 255:
        scaled = pixels / 257.0 if pixels.max() <= 65535 else pixels * (255.0 / pixels.max())
    else:
        scaled = pixels
    gray = np.clip(np.nan_to_num(scaled) + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(gray, "L")


def read_image(
    path: str | os.PathLike, channels: int = 3, size: tuple[int, int] | None = None
) -> np.ndarray:
    """An image file (any format Pillow reads) as an (H, W, channels) uint8 array: RGB for 3,
    gray (luma) for 1, RGBA for 4. `size` (width, height) resizes it (bilinear) when it differs.
    """
    if channels not in _MODES:
        raise InvalidInputError(f"an image has 1, 3 or 4 channels, not {channels}")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise InvalidInputError(
            "reading images needs Pillow: pip install 'tinydl[image]'"
        ) from None
    try:
        with Image.open(path) as image:
            image.load()
            image = _eight_bit(image, Image)
            if "A" in image.getbands() and channels != 4:
                warnings.warn(
                    f"{path}: the image's alpha channel is dropped ({channels}-channel input)",
                    stacklevel=2,
                )
            image = image.convert(_MODES[channels])
            if size is not None and image.size != tuple(size):
                image = image.resize(tuple(size), Image.Resampling.BILINEAR)
            pixels = np.asarray(image)
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file") from None
    except Image.DecompressionBombError as exc:
        raise InvalidInputError(
            f"{path}: refused, larger than Pillow's limit for untrusted images ({exc}); "
            "raise PIL.Image.MAX_IMAGE_PIXELS if the file is trusted"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InvalidInputError(f"{path}: not a readable image ({exc})") from None
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def _per_channel(values: float | Sequence[float] | None, channels: int, what: str) -> Any:
    if values is None:
        return None
    v = np.asarray(values, np.float64).reshape(-1)
    if v.size not in (1, channels):
        raise InvalidInputError(f"{what} has {v.size} values for {channels} channel(s)")
    return v


def _channel_shape(ndim: int, axis: int) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel vector along `axis` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = -1
    return tuple(shape)


def image_to_tensor(
    image: np.ndarray,
    layout: str = "NCHW",
    mean: float | Sequence[float] | None = None,
    std: float | Sequence[float] | None = None,
    dtype: Any = np.float32,
) -> np.ndarray:
    """Channels-last image(s) (H, W[, C]) or (N, H, W, C) as a model input: channels first for
    layout "NCHW" ((C, H, W) or (N, C, H, W)), axes kept for "NHWC"; uint8 scaled to 0..1, then
    (x - mean) / std per channel. A float image is taken as 0..1 already. dtype uint8 keeps the
    pixels as they are (only the axes move; mean/std do not apply)."""
    if layout not in LAYOUTS:
        raise InvalidInputError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim not in (3, 4):
        raise InvalidInputError(
            f"expected an image (H, W, C) or a batch (N, H, W, C), got shape {image.shape}"
        )
    channels = image.shape[-1]
    x = np.moveaxis(image, -1, -3) if layout == "NCHW" else image
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        if mean is not None or std is not None:
            raise InvalidInputError("mean/std need a float tensor, not uint8")
        if image.dtype != np.uint8:
            raise InvalidInputError(f"a uint8 tensor needs uint8 pixels, got {image.dtype}")
        return np.ascontiguousarray(x)
    if dtype.kind != "f":
        raise InvalidInputError(f"a tensor from an image is float or uint8, not {dtype}")
    m, s = _per_channel(mean, channels, "mean"), _per_channel(std, channels, "std")
    # Work in float32 at least (a float16 tensor is rounded once, at the end).
    work = np.promote_types(dtype, np.float32)
    out = x.astype(work, order="C")  # a fresh contiguous array in the target layout
    if image.dtype == np.uint8:
        np.divide(out, work.type(255), out=out)
    axis = -3 if layout == "NCHW" else -1
    if m is not None:
        out -= m.astype(work).reshape(_channel_shape(out.ndim, axis))
    if s is not None:
        out /= s.astype(work).reshape(_channel_shape(out.ndim, axis))
    return out if out.dtype == dtype else out.astype(dtype)


def tensor_to_image(
    tensor: np.ndarray,
    layout: str = "NCHW",
    mean: float | Sequence[float] | None = None,
    std: float | Sequence[float] | None = None,
    dtype: Any = np.uint8,
) -> np.ndarray:
    """The reverse of image_to_tensor: (C, H, W) / (N, C, H, W) (or channels-last with layout
    "NHWC") to channels-last image(s); x * std + mean, clipped to 0..1, then uint8 levels
    (rounded to nearest) or, for a float dtype, 0..1 values of that dtype."""
    if layout not in LAYOUTS:
        raise InvalidInputError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    x = np.asarray(tensor)
    if x.ndim not in (3, 4):
        raise InvalidInputError(f"expected a tensor (C, H, W) or (N, C, H, W), got shape {x.shape}")
    axis = -3 if layout == "NCHW" else -1
    channels = x.shape[axis]
    m, s = _per_channel(mean, channels, "mean"), _per_channel(std, channels, "std")
    work = np.promote_types(x.dtype, np.float32) if x.dtype.kind == "f" else np.dtype(np.float32)
    y = x.astype(work, copy=False)
    if s is not None:
        y = y * s.astype(work).reshape(_channel_shape(y.ndim, axis))
    if m is not None:
        y = y + m.astype(work).reshape(_channel_shape(y.ndim, axis))
    y = np.clip(y, 0.0, 1.0)  # a new array: the tensor is left alone
    if layout == "NCHW":
        y = np.moveaxis(y, -3, -1)
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        y *= work.type(255)
        return np.rint(y).astype(np.uint8)
    if dtype.kind != "f":
        raise InvalidInputError(f"an image is uint8 or float, not {dtype}")
    return np.ascontiguousarray(y, dtype=dtype)
