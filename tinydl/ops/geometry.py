"""Geometric resampling in tinydl's domain: tinydl.Warp, a batch of crops cut out of images by a
3x3 matrix each (rotated rectangles for BlazePose's landmark model, perspective quads for text
lines), sampled bilinearly as OpenCV's warpPerspective does with WARP_INVERSE_MAP. The output
size is an attribute, or an optional third input whose value is known when the run is planned
(a constant, or computed from input shapes: a recognizer's batch width).
"""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, op

BORDERS = ("zero", "replicate")
LAYOUTS = ("NCHW", "NHWC")


def output_size(size, attrs) -> tuple[int, int]:
    """The output (height, width): the `size` input's two values when given, else the
    attributes; either must be positive."""
    if size is None:
        oh, ow = attrs["output_height"], attrs["output_width"]
    else:
        values = np.asarray(size).reshape(-1)
        if values.size != 2:
            raise ValueError(f"size must hold 2 values (height, width), got {values.size}")
        oh, ow = (int(v) for v in values)
    if min(oh, ow) < 1:
        raise ValueError(f"output size {oh}x{ow} must be positive")
    return oh, ow


def _warp_infer(ctx: InferContext) -> list[TensorType]:
    a = ctx.attrs
    size = ctx.const(2) if ctx.has(2) else None
    if ctx.has(2) and size is None:  # known only once the run is planned
        oh = ow = None
    else:
        try:
            oh, ow = output_size(size, a)
        except ValueError as exc:
            raise ctx.fail(str(exc)) from None
    if a["border"] not in BORDERS or a["layout"] not in LAYOUTS:
        raise ctx.fail(
            f"border must be one of {BORDERS} and layout one of {LAYOUTS}, "
            f"got {a['border']!r}, {a['layout']!r}"
        )
    x, m = ctx.shape(0), ctx.shape(1)
    if m is not None and (len(m) != 3 or any(isinstance(d, int) and d != 3 for d in m[1:])):
        raise ctx.fail(f"matrix must have shape (K, 3, 3), got {m}")
    k = None if m is None else m[0]
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    if len(x) != 4:
        raise ctx.fail(f"image must be 4-D ({a['layout']}), got shape {x}")
    if isinstance(x[0], int) and isinstance(k, int) and x[0] not in (1, k):
        raise ctx.fail(f"image batch {x[0]} must be 1 or the matrix batch {k}")
    if a["layout"] == "NCHW":
        return [TensorType(ctx.dtype(0), (k, x[1], oh, ow))]
    return [TensorType(ctx.dtype(0), (k, oh, ow, x[3]))]


@op(
    "tinydl.Warp",
    types={0: "float", 1: "float", 2: "index"},
    inputs=(2, 3),
    infer=_warp_infer,
    attrs={
        "output_height": Attr("int", 0),
        "output_width": Attr("int", 0),
        "border": Attr("string", "zero"),
        "layout": Attr("string", "NCHW"),
    },
)
def warp(x, matrix, size=None, *, output_height, output_width, border, layout):
    """Crop k of an output_height x output_width grid (or size[0] x size[1]): output pixel
    (u, v) samples the image (image k, or the only one when the batch is 1) at (X/W, Y/W) for
    (X, Y, W) = matrix[k] @ (u, v, 1), in input pixel coordinates (pixel centres at integers),
    bilinearly. border "zero": a tap outside the image reads 0; "replicate": the nearest edge
    pixel. A point that is not finite (W = 0) reads as outside."""
    if x.ndim != 4 or matrix.ndim != 3 or matrix.shape[1:] != (3, 3):
        raise ValueError(f"image {x.shape} and matrix {matrix.shape}: want 4-D and (K, 3, 3)")
    if x.shape[0] not in (1, matrix.shape[0]):
        raise ValueError(f"image batch {x.shape[0]} must be 1 or the matrix batch {len(matrix)}")
    output_height, output_width = output_size(
        size, {"output_height": output_height, "output_width": output_width}
    )
    nhwc = x if layout == "NHWC" else x.transpose(0, 2, 3, 1)
    h, w = nhwc.shape[1:3]
    m = matrix.astype(np.float64)
    v, u = np.meshgrid(np.arange(output_height), np.arange(output_width), indexing="ij")
    p = m[:, :, 0, None, None] * u + m[:, :, 1, None, None] * v + m[:, :, 2, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sx, sy = p[:, 0] / p[:, 2], p[:, 1] / p[:, 2]
    # Past one pixel outside, every tap is outside (zero) or on the edge (replicate) alike:
    # clipping there keeps the result and the integer conversion in range.
    sx = np.clip(np.nan_to_num(sx, nan=-2.0, posinf=w + 1.0, neginf=-2.0), -2.0, w + 1.0)
    sy = np.clip(np.nan_to_num(sy, nan=-2.0, posinf=h + 1.0, neginf=-2.0), -2.0, h + 1.0)
    x0, y0 = np.floor(sx), np.floor(sy)
    fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    image = nhwc.astype(np.float64)
    batch = (np.arange(len(m)) if nhwc.shape[0] > 1 else np.zeros(len(m), np.int64))[:, None, None]

    def tap(yi, xi):
        value = image[batch, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
        if border == "replicate":
            return value
        inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
        return np.where(inside[..., None], value, 0.0)

    top = (1 - fx) * tap(y0, x0) + fx * tap(y0, x0 + 1)
    bottom = (1 - fx) * tap(y0 + 1, x0) + fx * tap(y0 + 1, x0 + 1)
    out = (1 - fy) * top + fy * bottom
    if layout == "NCHW":
        out = out.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(out).astype(x.dtype)
