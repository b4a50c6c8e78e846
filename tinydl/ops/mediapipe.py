"""MediaPipe's geometric TFLite custom ops, in tinydl's domain: tinydl.Landmarks2TransformMatrix
and tinydl.TransformTensorBilinear (version 2 of each, as the face mesh with attention uses them).

The TFLite importer maps the custom ops of the same names onto these; MediaPipe's C++ kernels
(mediapipe/util/tflite/operations/) define the semantics, which the references follow step by
step (in float64, cast back at the end). Batches are independent; MediaPipe itself runs batch 1.
"""

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, op


def _landmarks_infer(ctx: InferContext) -> list[TensorType]:
    a = ctx.attrs
    subset = a["subset_idxs"]
    if not subset:
        raise ctx.fail("subset_idxs must name at least one landmark")
    if min(a["output_height"], a["output_width"]) < 1 or min(a["scale_x"], a["scale_y"]) <= 0:
        raise ctx.fail("output_height, output_width, scale_x and scale_y must be positive")
    used = [a["left_rotation_idx"], a["right_rotation_idx"], *subset]
    if min(used) < 0:
        raise ctx.fail(f"landmark indices must not be negative, got {sorted(set(used))}")
    x = ctx.shape(0)
    if x is None:
        return [TensorType(ctx.dtype(0), (None, 4, 4))]
    if len(x) != 3 or (isinstance(x[2], int) and x[2] != 3):
        raise ctx.fail(f"landmarks must have shape (N, L, 3), got {x}")
    if isinstance(x[1], int) and max(used) >= x[1]:
        raise ctx.fail(f"landmark index {max(used)} is out of range for {x[1]} landmarks")
    return [TensorType(ctx.dtype(0), (x[0], 4, 4))]


@op(
    "tinydl.Landmarks2TransformMatrix",
    types="float",
    infer=_landmarks_infer,
    attrs={
        "left_rotation_idx": Attr("int"),
        "right_rotation_idx": Attr("int"),
        "subset_idxs": Attr("ints"),
        "target_rotation_radians": Attr("float", 0.0),
        "output_height": Attr("int"),
        "output_width": Attr("int"),
        "scale_x": Attr("float", 1.0),
        "scale_y": Attr("float", 1.0),
    },
)
def landmarks_to_transform_matrix(
    x,
    *,
    left_rotation_idx,
    right_rotation_idx,
    subset_idxs,
    target_rotation_radians,
    output_height,
    output_width,
    scale_x,
    scale_y,
):
    """The 4x4 matrix taking an output_width x output_height crop's pixels to landmark space:
    the crop is the bounding box of the `subset_idxs` landmarks (x, y of (N, L, 3); MediaPipe
    stores them as pairs, an odd last one paired with itself: the same set) in the frame
    rotated so the left->right rotation landmarks lie at target_rotation_radians, scaled by
    scale_x, scale_y about its centre."""
    used = max(left_rotation_idx, right_rotation_idx, *subset_idxs)
    if x.ndim != 3 or x.shape[2] != 3 or used >= x.shape[1]:
        raise ValueError(f"landmarks of shape {x.shape} have no landmark {used} with x, y, z")
    lm = x.astype(np.float64)
    d = lm[:, right_rotation_idx, :2] - lm[:, left_rotation_idx, :2]
    r = target_rotation_radians - np.arctan2(d[:, 1], d[:, 0])
    c, s = np.cos(r)[:, None], np.sin(r)[:, None]
    px, py = lm[:, subset_idxs, 0], lm[:, subset_idxs, 1]
    rx, ry = c * px - s * py, s * px + c * py
    lo_x, hi_x, lo_y, hi_y = rx.min(1), rx.max(1), ry.min(1), ry.max(1)
    mx, my = (lo_x + hi_x) / 2, (lo_y + hi_y) / 2
    c, s = c[:, 0], s[:, 0]
    # shift(centre) @ rotate(-r) @ scale @ shift(-output size / 2), the C++ product.
    sx = scale_x * (hi_x - lo_x) / output_width
    sy = scale_y * (hi_y - lo_y) / output_height
    a00, a01, a10, a11 = c * sx, s * sy, -s * sx, c * sy
    out = np.zeros((lm.shape[0], 4, 4))
    out[:, 0, 0], out[:, 0, 1], out[:, 1, 0], out[:, 1, 1] = a00, a01, a10, a11
    out[:, 0, 3] = c * mx + s * my - a00 * output_width / 2 - a01 * output_height / 2
    out[:, 1, 3] = -s * mx + c * my - a10 * output_width / 2 - a11 * output_height / 2
    out[:, 2, 2] = out[:, 3, 3] = 1
    return out.astype(x.dtype)


def _transform_infer(ctx: InferContext) -> list[TensorType]:
    oh, ow = ctx.attrs["output_height"], ctx.attrs["output_width"]
    if min(oh, ow) < 1:
        raise ctx.fail(f"output size {oh}x{ow} must be positive")
    x, m = ctx.shape(0), ctx.shape(1)
    if m is not None and (len(m) != 3 or any(isinstance(d, int) and d != 4 for d in m[1:])):
        raise ctx.fail(f"matrix must have shape (N, 4, 4), got {m}")
    if x is None:
        return [TensorType(ctx.dtype(0), (None, None, oh, ow))]
    if len(x) != 4:
        raise ctx.fail(f"input must be 4-D (N, C, H, W), got shape {x}")
    if m is not None and isinstance(m[0], int) and isinstance(x[0], int) and m[0] not in (1, x[0]):
        raise ctx.fail(f"matrix batch {m[0]} does not fit input batch {x[0]}")
    return [TensorType(ctx.dtype(0), (x[0], x[1], oh, ow))]


@op(
    "tinydl.TransformTensorBilinear",
    types={0: "float", 1: "float"},
    same_dtype="all",
    inputs=2,
    infer=_transform_infer,
    attrs={"output_height": Attr("int"), "output_width": Attr("int")},
)
def transform_tensor_bilinear(x, matrix, *, output_height, output_width):
    """Sample x (N, C, H, W) bilinearly at matrix @ (p + 0.5) - 0.5 for each output pixel p
    (x, y, 0, 1) of an output_height x output_width grid; a sample point outside
    [0, W-1] x [0, H-1] gives 0, and a corner past the last row or column reads 0."""
    if x.ndim != 4 or matrix.shape[1:] != (4, 4) or matrix.shape[0] not in (1, x.shape[0]):
        raise ValueError(f"input {x.shape} and matrix {matrix.shape}: want (N, C, H, W), (N, 4, 4)")
    n, _, h, w = x.shape
    m = matrix.astype(np.float64)[:, :2, :]
    shift = m[:, :, 3] + 0.5 * m[:, :, 0] + 0.5 * m[:, :, 1] - 0.5
    oy, ox = np.meshgrid(np.arange(output_height), np.arange(output_width), indexing="ij")
    tx = m[:, 0, 0, None, None] * ox + m[:, 0, 1, None, None] * oy + shift[:, 0, None, None]
    ty = m[:, 1, 0, None, None] * ox + m[:, 1, 1, None, None] * oy + shift[:, 1, None, None]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    tx, ty = np.where(inside, tx, 0), np.where(inside, ty, 0)
    x0, y0 = np.floor(tx), np.floor(ty)
    fx, fy = (tx - x0)[..., None], (ty - y0)[..., None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    hwc = x.astype(np.float64).transpose(0, 2, 3, 1)
    batch = np.arange(n)[:, None, None]

    def read(yi, xi):
        ok = (inside & (yi < h) & (xi < w))[..., None]
        return np.where(ok, hwc[batch, np.minimum(yi, h - 1), np.minimum(xi, w - 1)], 0)

    upper = (1 - fx) * read(y0, x0) + fx * read(y0, x0 + 1)
    lower = (1 - fx) * read(y0 + 1, x0) + fx * read(y0 + 1, x0 + 1)
    out = fy * lower + (1 - fy) * upper
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)).astype(x.dtype)
