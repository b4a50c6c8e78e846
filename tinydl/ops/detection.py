"""Detection heads: NonMaxSuppression (an output whose length depends on the data) and RoiAlign."""

from __future__ import annotations

import numpy as np

from tinydl.ops.base import Attr, InferContext, TensorType, op


def _known(dim, want: int) -> bool:
    """Whether `dim` is a concrete size other than `want`."""
    return isinstance(dim, int) and dim != want


def _nms_infer(ctx: InferContext) -> list[TensorType]:
    boxes, scores = ctx.shape(0), ctx.shape(1)
    if ctx.attrs["center_point_box"] not in (0, 1):
        raise ctx.fail(f"center_point_box must be 0 or 1, got {ctx.attrs['center_point_box']}")
    if boxes is not None and (len(boxes) != 3 or _known(boxes[2], 4)):
        raise ctx.fail(f"boxes must be [batch, boxes, 4], got {boxes}")
    if scores is not None and len(scores) != 3:
        raise ctx.fail(f"scores must be [batch, classes, boxes], got {scores}")
    if boxes is not None and scores is not None:
        for axis, (b, s) in enumerate(
            zip((boxes[0], boxes[1]), (scores[0], scores[2]), strict=True)
        ):
            if isinstance(b, int) and isinstance(s, int) and b != s:
                raise ctx.fail(f"boxes {boxes} and scores {scores} disagree on axis {axis}")
    # How many boxes survive is known only once the scores are.
    return [TensorType("int64", (None, 3))]


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of each box, as onnxruntime computes them in the box dtype."""
    if center_point_box:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        half_w, half_h = w / boxes.dtype.type(2), h / boxes.dtype.type(2)
        return yc - half_h, xc - half_w, yc + half_h, xc + half_w
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _overlaps(top: tuple[np.ndarray, ...], rest: tuple[np.ndarray, ...], threshold) -> np.ndarray:
    """Whether IoU(top, each of rest) exceeds the threshold; empty or disjoint boxes never do."""
    (ty0, tx0, ty1, tx1), (ry0, rx0, ry1, rx1) = top, rest
    ix0, ix1 = np.maximum(tx0, rx0), np.minimum(tx1, rx1)
    iy0, iy1 = np.maximum(ty0, ry0), np.minimum(ty1, ry1)
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_top, area_rest = (tx1 - tx0) * (ty1 - ty0), (rx1 - rx0) * (ry1 - ry0)
    union = area_top + area_rest - inter
    ok = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_top > 0) & (area_rest > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ok & (inter / np.where(ok, union, 1) > threshold)


@op(
    "NonMaxSuppression",
    types={0: "float", 1: "float", 2: "index", 3: "float", 4: "float"},
    same_dtype=(0, 1),
    inputs=(2, 5),
    attrs={"center_point_box": Attr("int", 0)},
    infer=_nms_infer,
)
def non_max_suppression(
    boxes,
    scores,
    max_output_boxes_per_class=None,
    iou_threshold=None,
    score_threshold=None,
    *,
    center_point_box,
):
    """Greedy NMS per batch and class: the best remaining box is kept and every box overlapping
    it by more than iou_threshold dropped, up to max_output_boxes_per_class (none given: no
    output). Rows [batch, class, box] by batch, then class, then descending score (ties: the
    lower box index first), as onnxruntime orders them. Each greedy step runs for every batch
    and class at once."""
    limit = (
        0 if max_output_boxes_per_class is None else int(np.ravel(max_output_boxes_per_class)[0])
    )
    iou = 0.0 if iou_threshold is None else float(np.ravel(iou_threshold)[0])
    if not 0 <= iou <= 1:
        raise ValueError(f"iou_threshold must be in [0, 1], got {iou}")
    batch, classes, n = scores.shape
    if boxes.shape != (batch, n, 4):
        raise ValueError(f"boxes {boxes.shape} do not fit scores {scores.shape}")
    order = np.argsort(-scores.astype(np.float64), axis=-1, kind="stable")  # [batch, classes, n]
    alive = np.ones(order.shape, bool)
    if score_threshold is not None:
        ranked = np.take_along_axis(scores, order, axis=-1)
        alive = ranked > scores.dtype.type(np.ravel(score_threshold)[0])
    corners = [
        np.take_along_axis(c[:, None, :], order, axis=-1) for c in _corners(boxes, center_point_box)
    ]
    threshold = boxes.dtype.type(iou)
    kept, found = [], []
    for _ in range(min(max(limit, 0), n)):
        some = alive.any(axis=-1)
        if not some.any():
            break
        top = alive.argmax(axis=-1)[..., None]
        top_corners = tuple(np.take_along_axis(c, top, axis=-1) for c in corners)
        alive &= ~_overlaps(top_corners, corners, threshold)
        np.put_along_axis(alive, top, False, axis=-1)
        kept.append(np.take_along_axis(order, top, axis=-1)[..., 0])
        found.append(some)
    if not kept:
        return np.zeros((0, 3), np.int64)
    kept, found = np.stack(kept, axis=-1), np.stack(found, axis=-1)  # [batch, classes, steps]
    b, c, s = np.nonzero(found)
    return np.stack([b, c, kept[b, c, s]], axis=-1).astype(np.int64)


_ROI_MODES = ("avg", "max")
_ROI_TRANSFORMS = ("half_pixel", "output_half_pixel")


def _roi_align_infer(ctx: InferContext) -> list[TensorType]:
    attrs = ctx.attrs
    if attrs["mode"] not in _ROI_MODES:
        raise ctx.fail(f"mode must be one of {', '.join(_ROI_MODES)}, got {attrs['mode']}")
    if attrs["coordinate_transformation_mode"] not in _ROI_TRANSFORMS:
        raise ctx.fail(
            f"coordinate_transformation_mode must be one of {', '.join(_ROI_TRANSFORMS)}, "
            f"got {attrs['coordinate_transformation_mode']}"
        )
    if attrs["output_height"] < 1 or attrs["output_width"] < 1 or attrs["sampling_ratio"] < 0:
        raise ctx.fail("output_height and output_width must be >= 1, sampling_ratio >= 0")
    x, rois = ctx.shape(0), ctx.shape(1)
    if x is not None and len(x) != 4:
        raise ctx.fail(f"X must be 4-D (N, C, H, W), got {x}")
    if rois is not None and (len(rois) != 2 or _known(rois[1], 4)):
        raise ctx.fail(f"rois must be [num_rois, 4], got {rois}")
    shape = (
        None if rois is None else rois[0],
        None if x is None else x[1],
        attrs["output_height"],
        attrs["output_width"],
    )
    return [TensorType(ctx.dtype(0), shape)]


# RoiAlign (avg) multiplies this many rois' matrices at a time (bounds the [rois, C, bins, W]
# intermediate).
ROI_CHUNK = 64


def _samples(start, size, bins: int, grid: np.ndarray, length: int, ct):
    """Bilinear sampling along one axis for every roi: per [roi, bin, sample] the low and high
    index, their weights (zero for a sample outside the image, as onnxruntime takes it) and
    whether the sample exists (each roi has its own grid count)."""
    step = size / ct(bins)
    g = max(int(grid.max(initial=0)), 1)
    i = np.arange(g, dtype=ct)
    base = start[:, None, None] + np.arange(bins, dtype=ct)[None, :, None] * step[:, None, None]
    per = grid.astype(ct)[:, None, None]
    exists = np.broadcast_to(np.arange(g) < grid[:, None, None], base.shape[:2] + (g,))
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(exists, base + (i + ct(0.5)) * step[:, None, None] / per, 0)
    inside = (v >= -1) & (v <= length)
    v = np.maximum(v, 0)
    low = np.floor(v).astype(np.int64)
    edge = low >= length - 1
    low = np.where(edge, length - 1, low)
    high = np.where(edge, low, low + 1)
    frac = np.where(edge, 0, v - low).astype(ct)
    w_low, w_high = np.where(inside, 1 - frac, 0), np.where(inside, frac, 0)
    return low, high, w_low.astype(ct), w_high.astype(ct), exists


@op(
    "RoiAlign",
    types={0: "float", 1: "float", 2: "index"},
    same_dtype=(0, 1),
    inputs=3,
    attrs={
        "coordinate_transformation_mode": Attr("string", "half_pixel"),
        "mode": Attr("string", "avg"),
        "output_height": Attr("int", 1),
        "output_width": Attr("int", 1),
        "sampling_ratio": Attr("int", 0),
        "spatial_scale": Attr("float", 1.0),
    },
    infer=_roi_align_infer,
)
def roi_align(
    x,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    """Crop each roi (x1, y1, x2, y2 in input pixels times spatial_scale) from its batch entry
    into output_height x output_width bins, each the average (or the maximum, of the weighted
    bilinear corners as onnxruntime defines it) of a grid of bilinear samples: sampling_ratio
    per axis, or ceil(roi size / bins) when it is 0."""
    ct = np.promote_types(x.dtype, np.float32).type
    height, width = x.shape[2:]
    if (batch_indices < 0).any() or (batch_indices >= x.shape[0]).any():
        raise ValueError(
            f"batch_indices must lie in [0, {x.shape[0]}), got {batch_indices.tolist()}"
        )
    half = coordinate_transformation_mode == "half_pixel"
    r = rois.astype(ct) * ct(spatial_scale) - ct(0.5 if half else 0)
    x0, y0, x1, y1 = r.T
    roi_w, roi_h = x1 - x0, y1 - y0
    if not half:
        roi_w, roi_h = np.maximum(roi_w, ct(1)), np.maximum(roi_h, ct(1))
    grids = []
    for size, bins in ((roi_h, output_height), (roi_w, output_width)):
        auto = np.ceil(size / ct(bins)).astype(np.int64)
        grids.append(np.full(len(r), sampling_ratio) if sampling_ratio > 0 else np.maximum(auto, 0))
    ys = _samples(y0, roi_h, output_height, grids[0], height, ct)
    xs = _samples(x0, roi_w, output_width, grids[1], width, ct)
    if mode == "avg":
        # Bilinear sampling is separable: one interpolation matrix per axis, summed over samples.
        def matrix(low, high, w_low, w_high, exists, length):
            onehot = np.arange(length)
            m = (low[..., None] == onehot) * w_low[..., None] + (
                high[..., None] == onehot
            ) * w_high[..., None]
            return (m * exists[..., None]).sum(axis=2)  # [rois, bins, length]

        my, mx = matrix(*ys, height), matrix(*xs, width)
        count = np.maximum(grids[0] * grids[1], 1).astype(ct)[:, None, None, None]
        # my · image · mxᵀ per roi, as matrix products (BLAS) over a few rois of one image at
        # a time: no copy of the image per roi (an einsum over copies took 40 s of Keypoint
        # R-CNN's 50 on this backend)
        out = np.empty((len(r), x.shape[1], output_height, output_width), ct)
        for b in np.unique(batch_indices):
            image = x[b].astype(ct, copy=False)[None]  # [1, C, H, W]
            rows = np.flatnonzero(batch_indices == b)
            for at in range(0, len(rows), ROI_CHUNK):
                sel = rows[at : at + ROI_CHUNK]
                out[sel] = (my[sel][:, None] @ image) @ mx[sel][:, None].transpose(0, 1, 3, 2)
        return (out / count).astype(x.dtype)
    planes = x[batch_indices].astype(ct, copy=False)  # [rois, C, H, W]
    n_rois, channels = planes.shape[:2]
    (ylo, yhi, wylo, wyhi, yex), (xlo, xhi, wxlo, wxhi, xex) = ys, xs

    def flat(a):
        return a.reshape(n_rois, -1)  # [rois, bins * samples]

    best = None
    for yi, wy in ((ylo, wylo), (yhi, wyhi)):
        rows = np.take_along_axis(planes, flat(yi)[:, None, :, None], axis=2)
        for xi, wx in ((xlo, wxlo), (xhi, wxhi)):
            v = np.take_along_axis(rows, flat(xi)[:, None, None, :], axis=3)
            v = v * (flat(wy)[:, None, :, None] * flat(wx)[:, None, None, :])
            best = v if best is None else np.maximum(best, v)
    exists = flat(yex)[:, None, :, None] & flat(xex)[:, None, None, :]
    best = np.where(exists, best, -np.inf)
    gy, gx = ylo.shape[2], xlo.shape[2]
    best = best.reshape(n_rois, channels, output_height, gy, output_width, gx).max(axis=(3, 5))
    return np.where(np.isneginf(best), 0, best).astype(x.dtype)
