"""Images <-> tensors: the one place pixels are read from files and turned into model inputs and
back. Used by `tinydl run` (an image file as an input), the pipeline's `Inference` and
`ImageSource` components, and `tinydl superres`.

    rgb = read_image("cat.png")                      # (H, W, 3) uint8, RGB
    x = image_to_tensor(rgb[None])                   # (1, 3, H, W) float32 in [0, 1]
    x = image_to_tensor(rgb, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))  # (3, H, W)
    back = tensor_to_image(x)                        # (H, W, 3) uint8 again

    fit = resize_policy("multiple 32 min 736").fit(h, w)   # PP-OCR det: short side 736, x32
    x = image_to_tensor(resize_image(rgb, fit))      # fit.to_source(points) maps back

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
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
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


# -- resize policies -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """Where a resize policy puts one image: a `height` x `width` tensor image holding the source
    scaled to `inner_height` x `inner_width` at (`top`, `left`) (letterbox padding elsewhere)."""

    height: int
    width: int
    inner_height: int
    inner_width: int
    top: int = 0
    left: int = 0
    source_height: int = 0
    source_width: int = 0

    def to_source(self, points: np.ndarray) -> np.ndarray:
        """Points (..., 2) as (x, y) in tensor-image pixels, mapped back to source pixels."""
        p = np.asarray(points, np.float64)
        sx = self.source_width / self.inner_width
        sy = self.source_height / self.inner_height
        return np.stack([(p[..., 0] - self.left) * sx, (p[..., 1] - self.top) * sy], axis=-1)


_FIXED = re.compile(r"^(letterbox\s+)?(\d+)x(\d+)$")
_MULTIPLE = re.compile(r"^multiple\s+(\d+)(?:\s+(min|max)\s+(\d+))?$")


@dataclass(frozen=True)
class ResizePolicy:
    """How images are sized for a model. Spelled as a string (`resize_policy`):

    "640x480"             every image stretched to 640 wide, 480 high
    "letterbox 640x640"   scaled to fit, aspect kept, centered, padded with 0
    "multiple 32"         each side rounded to the nearest multiple of 32
    "multiple 32 min 736" scaled up so the short side is 736 (when shorter), then rounded to
                          multiples of 32: PP-OCR's detector (limit_type "min", 736)
    "multiple 32 max 960" scaled down so the long side is 960 (when longer), then rounded
    """

    kind: str  # "fixed" | "letterbox" | "multiple"
    width: int = 0
    height: int = 0
    multiple: int = 1
    limit: str | None = None  # "min" | "max"
    side: int = 0

    def fit(self, height: int, width: int) -> Fit:
        """Where an image of this size goes."""
        if height < 1 or width < 1:
            raise InvalidInputError(f"cannot resize an empty image ({height}x{width})")
        src = {"source_height": height, "source_width": width}
        if self.kind == "fixed":
            return Fit(self.height, self.width, self.height, self.width, **src)
        if self.kind == "letterbox":
            scale = min(self.width / width, self.height / height)
            ih = min(self.height, max(1, round(height * scale)))
            iw = min(self.width, max(1, round(width * scale)))
            top, left = (self.height - ih) // 2, (self.width - iw) // 2
            return Fit(self.height, self.width, ih, iw, top, left, **src)
        ratio = 1.0
        if self.limit == "min" and min(height, width) < self.side:
            ratio = self.side / min(height, width)
        elif self.limit == "max" and max(height, width) > self.side:
            ratio = self.side / max(height, width)
        # int() then round() as PP-OCR does (Python rounds half to even); never below one step.
        n = self.multiple
        h = max(n, int(round(int(height * ratio) / n) * n))
        w = max(n, int(round(int(width * ratio) / n) * n))
        return Fit(h, w, h, w, **src)


def resize_policy(spec: str | ResizePolicy) -> ResizePolicy:
    """Parse a resize policy string (see ResizePolicy); an InvalidInputError names the forms."""
    if isinstance(spec, ResizePolicy):
        return spec
    text = " ".join(str(spec).lower().split())
    if m := _FIXED.match(text):
        kind = "letterbox" if m.group(1) else "fixed"
        policy = ResizePolicy(kind, width=int(m.group(2)), height=int(m.group(3)))
        if policy.width > 0 and policy.height > 0:
            return policy
    elif m := _MULTIPLE.match(text):
        side = int(m.group(3) or 0)
        policy = ResizePolicy("multiple", multiple=int(m.group(1)), limit=m.group(2), side=side)
        if policy.multiple > 0 and (policy.limit is None or side > 0):
            return policy
    raise InvalidInputError(
        f"resize policy {spec!r}: expected 'WxH', 'letterbox WxH', 'multiple N', "
        "'multiple N min S' or 'multiple N max S' (positive numbers)"
    )


def _taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear interpolation taps along one axis, half-pixel centers, edges clamped (as OpenCV's
    INTER_LINEAR and ONNX Resize's half_pixel mode do, without antialiasing)."""
    x = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
    i0 = np.floor(x).astype(np.intp)
    return i0, np.minimum(i0 + 1, n_in - 1), (x - i0).astype(np.float32)


def resize_image(image: np.ndarray, fit: Fit, pad: float = 0) -> np.ndarray:
    """A channels-last image (H, W[, C]) resized bilinearly to `fit` (letterbox padding filled
    with `pad`); the dtype is kept (uint8 rounded to nearest)."""
    image = np.asarray(image)
    if image.shape[:2] != (fit.source_height, fit.source_width):
        raise InvalidInputError(
            f"resize planned for {fit.source_height}x{fit.source_width}, "
            f"got an image of {image.shape[0]}x{image.shape[1]}"
        )
    if image.shape[:2] == (fit.inner_height, fit.inner_width):
        inner = image
    else:
        r0, r1, rw = _taps(image.shape[0], fit.inner_height)
        c0, c1, cw = _taps(image.shape[1], fit.inner_width)
        per_pixel = (1,) * (image.ndim - 2)  # weights broadcast over the channels
        top = np.take(image, r0, axis=0).astype(np.float32)
        rows = np.take(image, r1, axis=0).astype(np.float32)
        rows -= top
        rows *= rw.reshape(-1, 1, *per_pixel)
        rows += top
        inner = np.take(rows, c0, axis=1)
        right = np.take(rows, c1, axis=1)
        right -= inner
        right *= cw.reshape(-1, *per_pixel)
        inner += right
        if image.dtype == np.uint8:
            # A blend of uint8 values stays in 0..255: round half up without a clip.
            inner += 0.5
            inner = inner.astype(np.uint8)
        else:
            inner = inner.astype(image.dtype, copy=False)
    if (fit.height, fit.width) == inner.shape[:2]:
        return inner
    out = np.full((fit.height, fit.width, *image.shape[2:]), pad, image.dtype)
    out[fit.top : fit.top + fit.inner_height, fit.left : fit.left + fit.inner_width] = inner
    return out
