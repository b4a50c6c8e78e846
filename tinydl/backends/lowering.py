"""Backend-neutral lowering of the ops whose geometry every GPU backend needs: pooling windows,
Resize tap tables, MatMul/Gemm strides and batch offsets, normalization rows, fused attention's
operand strides.

Each function takes a `Build` (backends/planned.py) and returns plain numbers and NumPy
tables; a backend's kernel module turns them into its own template parameters and uploads.
Data movement (Transpose, Slice, Pad, Concat, DepthToSpace) is lowered in gathers.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from tinydl.backends.base import Support
from tinydl.backends.indexing import broadcast_strides, strides_of
from tinydl.ops.base import normalize_axis
from tinydl.ops.conv import window_attrs, window_geometry
from tinydl.ops.reduce import topk_count
from tinydl.ops.resize import _check_resize_attrs, _given, _resize_targets, axis_taps


def pool(b) -> dict:
    """MaxPool/AveragePool over the spatial axes: the template parameters both backends use."""
    x, y = b.info(0), b.out()
    kshape = list(b.attrs["kernel_shape"])
    strides, dilations, pads = window_attrs(b.attrs, kshape)
    geo = window_geometry(
        x.shape[2:],
        kshape,
        strides,
        dilations,
        pads,
        b.attrs["auto_pad"],
        bool(b.attrs["ceil_mode"]),
    )
    return dict(
        nd=len(kshape),
        dims_in=list(x.shape[2:]),
        dims_out=list(y.shape[2:]),
        kernel=kshape,
        strides=strides,
        dilations=dilations,
        pads=[p for p, _, _ in geo],
        pads_end=[e for _, e, _ in geo],
        in_strides=strides_of(x.shape[2:]),
        plane=math.prod(x.shape[2:]),
        is_max=b.node.op == "MaxPool",
        include_pad=bool(b.attrs.get("count_include_pad", 0)),
        total=math.prod(y.shape),
    )


def warp(b) -> dict:
    """tinydl.Warp's template parameters (crops, image geometry in either layout, output size,
    border) for both GPU backends; empty when there is nothing to write."""
    x, mat, y = b.info(0), b.info(1), b.out()
    total = math.prod(y.shape)
    if total == 0:
        return {}
    layout = b.attrs["layout"]
    n, c, h, w = x.shape if layout == "NCHW" else (x.shape[0], x.shape[3], *x.shape[1:3])
    return dict(
        crops=mat.shape[0],
        images=n,
        c=c,
        h=h,
        w=w,
        oh=y.shape[2] if layout == "NCHW" else y.shape[1],
        ow=y.shape[3] if layout == "NCHW" else y.shape[2],
        layout=layout,
        border=b.attrs["border"],
        total=total,
    )


@dataclass
class ResizeTables:
    """Per axis, a row per output index: its taps' input offsets then the outside flag
    (`indices`), and the taps' weights then 0 (`weights`); `base` is each axis's first row."""

    indices: np.ndarray
    weights: np.ndarray
    taps: list[int]
    base: list[int]
    combos: list[tuple[int, ...]]
    weighted: bool


def _fewer_taps(idx: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the taps whose weight is 0 in every row; a single tap when every row then reads
    one element with a total weight of 1 (a crop of the batch axis, integral cubic positions).
    The kernel weighs only the axes with more than one tap."""
    keep = ~(w == 0).all(0)
    live_idx, live_w = (idx[:, keep], w[:, keep]) if keep.any() else (idx, w)
    if (live_idx == live_idx[:, :1]).all() and np.allclose(live_w.sum(1), 1, rtol=0, atol=1e-6):
        return live_idx[:, :1], np.ones((len(idx), 1))
    return (live_idx, live_w) if live_idx.shape[1] > 1 else (idx, w)


def resize(b) -> ResizeTables:
    """Resize's taps per output index and axis, from the op reference's own coordinate
    functions, so the kernel only gathers and sums."""
    x = b.info(0)
    attrs = dict(b.attrs)
    _check_resize_attrs(attrs)
    roi, scales, sizes = b.const(1), b.const(2), b.const(3)
    axes, scale, out = _resize_targets(
        x.shape, scales, sizes, attrs["axes"], attrs["keep_aspect_ratio_policy"]
    )
    ctm = attrs["coordinate_transformation_mode"]
    roi = np.ravel(roi).astype(np.float64) if _given(roi) else None
    st = strides_of(x.shape)
    idx_tables, w_tables, taps = [], [], []
    for d, n in enumerate(x.shape):
        if d in axes and not (out[d] == n and scale[d] == 1.0 and ctm != "tf_crop_and_resize"):
            k = axes.index(d)
            bounds = (0.0, 1.0) if roi is None else (roi[k], roi[k + len(roi) // 2])
            idx, w, outside = axis_taps(n, out[d], scale[d], attrs, bounds)
            idx, w = _fewer_taps(idx, w)
        else:
            idx, w, outside = np.arange(n)[:, None], np.ones((n, 1)), np.zeros(n, bool)
        idx_tables.append(np.concatenate([idx * st[d], outside[:, None]], 1).ravel())
        w_tables.append(np.concatenate([w, np.zeros((len(w), 1))], 1).ravel())
        taps.append(idx.shape[1])
    return ResizeTables(
        indices=np.concatenate(idx_tables).astype(np.int64),
        weights=np.concatenate(w_tables),
        taps=taps,
        base=np.cumsum([0] + [len(t) for t in idx_tables[:-1]]).tolist(),
        combos=list(itertools.product(*[range(t) for t in taps])),
        weighted=attrs["mode"] != "nearest" and max(taps) > 1,
    )


@dataclass
class MatMulGeometry:
    """C = alpha * A·B + beta * bias, A and B read through element strides (so transposed
    operands need no copy), one (A offset, B offset) per batch entry."""

    batch: list[tuple[int, int]]
    m: int
    n: int
    k: int
    sa: tuple[int, int]
    sb: tuple[int, int]
    sc: tuple[int, int] = (0, 0)
    alpha: float = 1.0
    beta: float = 1.0
    has_c: bool = False


def matmul(b) -> MatMulGeometry:
    """MatMul (NumPy semantics: batch broadcasting, 1-D promotion) or Gemm (transA/B, C)."""
    shape_a, shape_b = b.info(0).shape, b.info(1).shape
    if b.node.op == "Gemm":
        m, k = shape_a[::-1] if b.attrs["transA"] else shape_a
        n = shape_b[0] if b.attrs["transB"] else shape_b[1]
        geo = MatMulGeometry(
            [(0, 0)],
            m,
            n,
            k,
            (1, m) if b.attrs["transA"] else (k, 1),
            (1, k) if b.attrs["transB"] else (n, 1),
            alpha=float(b.attrs["alpha"]),
            beta=float(b.attrs["beta"]),
        )
        if b.has(2):
            geo.has_c = True
            geo.sc = tuple(broadcast_strides(b.info(2).shape, (m, n)))
        return geo
    a2 = (1, *shape_a) if len(shape_a) == 1 else tuple(shape_a)
    b2 = (*shape_b, 1) if len(shape_b) == 1 else tuple(shape_b)
    m, k = a2[-2:]
    n = b2[-1]
    batch_shape = np.broadcast_shapes(a2[:-2], b2[:-2])
    a_st = broadcast_strides(a2[:-2], batch_shape) if a2[:-2] else []
    b_st = broadcast_strides(b2[:-2], batch_shape) if b2[:-2] else []
    offsets = []
    for idx in np.ndindex(*batch_shape):
        ao = sum(i * s for i, s in zip(idx[len(idx) - len(a_st) :], a_st, strict=True)) * m * k
        bo = sum(i * s for i, s in zip(idx[len(idx) - len(b_st) :], b_st, strict=True)) * k * n
        offsets.append((ao, bo))
    return MatMulGeometry(offsets or [(0, 0)], m, n, k, (k, 1), (n, 1))


def fold_batch(g: MatMulGeometry) -> MatMulGeometry:
    """A batch of products with one B (broadcast: every B offset 0) and A's items back to back
    as one product of all their rows: the items' rows, and the output's, are contiguous. (A
    transformer's projection of [tokens, 1, features] as 50 products of one row each is then
    one of 50 rows.)"""
    rows = g.m * g.k
    if (
        len(g.batch) > 1
        and not g.has_c
        and g.sa == (g.k, 1)
        and all(bo == 0 for _, bo in g.batch)
        and all(ao == i * rows for i, (ao, _) in enumerate(g.batch))
    ):
        return dataclasses.replace(g, batch=[(0, 0)], m=len(g.batch) * g.m)
    return g


@dataclass
class NormRows:
    """LayerNormalization, InstanceNormalization and GroupNormalization as `rows` contiguous
    rows of `length` elements, each normalized alone. Element k of row r takes scale and bias
    `k` (per_channel False: LayerNormalization's, one per element of the normalized shape), or
    those of channel (r % groups) * (channels // groups) + k // spatial."""

    rows: int
    length: int
    per_channel: bool
    groups: int = 1
    channels: int = 1
    spatial: int = 1


def norm_rows(b) -> NormRows:
    shape = b.info(0).shape
    if b.node.op == "LayerNormalization":
        axis = normalize_axis(b.attrs["axis"], len(shape))
        return NormRows(math.prod(shape[:axis]), math.prod(shape[axis:]), False)
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    groups = c if b.node.op == "InstanceNormalization" else b.attrs["num_groups"]
    return NormRows(n * groups, c // groups * spatial, True, groups, c, spatial)


def channel_norm_rows(b) -> tuple[int, int, int]:
    """A channels-first LayerNormalization (fusion.fuse_channel_norms) over its input of shape
    (N, C, spatial...): (pixels N * spatial, channels C, the spatial size: channel stride)."""
    shape = b.info(0).shape
    hw = math.prod(shape[2:])
    return shape[0] * hw, shape[1], hw


def norm_supports(node, graph) -> Support:
    """The GPU kernels compute statistics in f32, and take LayerNormalization's scale and bias
    with the normalized shape itself (not broadcast to it)."""
    if node.attrs.get("stash_type", 1) != 1:
        return Support(
            False,
            f"{node.op}: stash_type {node.attrs['stash_type']} (statistics "
            "in that type) is not implemented; the kernels compute them in f32",
        )
    if node.op != "LayerNormalization":
        return Support(True)
    if len([o for o in node.outputs[1:] if o]) == 1:
        return Support(
            False,
            f"{node.op}: Mean without InvStdDev (or the reverse) is not "
            "implemented; the kernels write both or neither",
        )
    x = graph.value(node.inputs[0])
    if x is None or x.shape is None:
        return Support(False, f"{node.op}: the input's rank is unknown")
    axis = normalize_axis(node.attrs["axis"], len(x.shape))
    normalized = tuple(x.shape[axis:])

    def same(shape) -> bool:
        # a dim known only when planning matches a scale's dim above 1 (which it must equal)
        return len(shape) == len(normalized) and all(
            d == n or (not isinstance(n, int) and isinstance(d, int) and d > 1)
            for d, n in zip(shape, normalized, strict=True)
        )

    for name in node.inputs[1:]:
        v = graph.value(name) if name else None
        if name and (v is None or v.shape is None or not same(tuple(v.shape))):
            got = "unknown" if v is None or v.shape is None else tuple(v.shape)
            return Support(
                False,
                f"{node.op}: scale or bias of shape {got} broadcast to the "
                f"normalized shape {normalized} is not implemented",
            )
    return Support(True)


# TopK's kernels make a pass over the row per output element: k beyond this is refused.
TOPK_MAX = 1024


@dataclass
class TopKRows:
    """TopK as `rows` rows of `length` elements `inner` apart (row r starts at
    (r // inner) * length * inner + r % inner); its k outputs per row are `inner` apart too,
    in order (sorted=0 gets the sorted order as well)."""

    rows: int
    length: int
    inner: int
    k: int


def topk_rows(b) -> TopKRows:
    shape = b.info(0).shape
    axis = normalize_axis(b.attrs["axis"], len(shape))
    length, inner = shape[axis], math.prod(shape[axis + 1 :])
    rows = math.prod(shape) // length if length else 0
    return TopKRows(rows, length, inner, topk_count(b.const(1), length))


def grid_sample_supports(node, graph) -> Support:
    """The GPU kernels sample 2-D images."""
    x = graph.value(node.inputs[0])
    if x is not None and x.shape is not None and len(x.shape) != 4:
        return Support(False, f"GridSample over {len(x.shape) - 2}-D inputs is not implemented")
    return Support(True)


def grid_sample(b) -> dict:
    """A 2-D GridSample's template parameters: N images of C x H x W sampled at OH x OW grids
    (TOTAL outputs), the mode, padding and corner alignment."""
    from tinydl.ops.resize import GRID_MODES

    n, c, h, w = b.info(0).shape
    _, oh, ow, _ = b.info(1).shape
    return dict(
        N=n, C=c, H=h, W=w, OH=oh, OW=ow, TOTAL=n * c * oh * ow,
        mode=GRID_MODES[b.attrs["mode"]], padding=b.attrs["padding_mode"],
        align=bool(b.attrs["align_corners"]),
    )  # fmt: skip


def upper_bound(name: str, graph) -> float | None:
    """A bound on every element of value `name` known from the graph alone, or None: a
    constant's largest element, carried through views and casts, and the minimum of bounded
    terms (torchvision's detectors take k = min(pre_nms_top_n, anchors) so, from shapes)."""
    from tinydl.ops import schema_of

    producers = graph.producers()

    def largest(value) -> float | None:
        return float(np.max(value)) if np.size(value) else None

    def bound(v: str, depth: int) -> float | None:
        if v in graph.initializers:
            return largest(graph.initializers[v])
        node = producers.get(v) if depth else None
        if node is None:
            return None
        if node.op == "Constant":
            return largest(schema_of("Constant").run(node, [])[0])
        if node.op in ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten"):
            return bound(node.inputs[0], depth - 1)
        no_axes = (len(node.inputs) < 2 or not node.inputs[1]) and not node.attrs.get("axes")
        whole = node.op == "ReduceMin" and (no_axes or _rank(graph, node.inputs[0]) == 1)
        if node.op != "Min" and not whole:
            return None
        # the minimum is at most any term's bound (over a Concat's pieces: any piece's)
        terms = node.inputs if node.op == "Min" else [node.inputs[0]]
        src = producers.get(node.inputs[0]) if whole else None
        if src is not None and src.op == "Concat":
            terms = src.inputs
        bounds = [b for b in (bound(t, depth - 1) for t in terms if t) if b is not None]
        return min(bounds) if bounds else None

    return bound(name, 16)


def _rank(graph, name: str) -> int | None:
    v = graph.value(name)
    return None if v is None or v.shape is None else len(v.shape)


def topk_extent(node, graph) -> tuple[float | None, int | None]:
    """TopK's k bound (`upper_bound`) and its axis's length, each None where unknown before
    planning."""
    x = graph.value(node.inputs[0])
    length = None
    if x is not None and x.shape is not None:
        dim = x.shape[normalize_axis(node.attrs["axis"], len(x.shape))]
        length = dim if isinstance(dim, int) else None
    return upper_bound(node.inputs[1], graph), length


def topk_supports(node, graph) -> Support:
    from tinydl.backends.planned import shape_derived

    name = node.inputs[1]
    k = graph.initializers.get(name)
    if k is None and not shape_derived(name, graph):
        return Support(False, f"{node.op} needs k constant; it is computed at run time")
    # k computed from shapes (a plan folds it) must be bounded, by itself or the axis
    bound, length = topk_extent(node, graph)
    bound = length if bound is None else bound
    x = graph.value(node.inputs[0])
    if bound is None:
        return Support(
            False,
            f"{node.op}'s k is computed from shapes with no bound known before planning; "
            f"the kernels take k up to {TOPK_MAX}",
        )
    if bound > TOPK_MAX:
        what = f"k = {int(bound)}" if k is not None else f"k up to {int(bound)}"
        return Support(
            False,
            f"{node.op} with {what} > {TOPK_MAX} is not "
            "implemented: the kernels make a pass over the row per output element",
        )
    if x is not None and x.dtype not in ("float32", "float16", "int32", "int64"):
        return Support(False, f"{node.op} on {x.dtype} is not implemented")
    return Support(True)


@dataclass
class AttentionGeometry:
    """softmax(scale · Q·Kᵀ + mask)·V for each of b × h (batch, head) pairs (b = 1 below 4-D):
    m queries, n keys, head dims d (Q, K) and dv (V). Each operand is read through element
    strides over (batch, head, row, column), 0 where it broadcasts, so transposed operands need
    no copy: q's rows are queries, k's those of Kᵀ as the MatMul reads it (rows d, columns
    keys), v's keys; mask's (rows queries, columns keys) is None without a mask. The output is
    contiguous (b, h, m, dv)."""

    b: int
    h: int
    m: int
    n: int
    d: int
    dv: int
    q: tuple[int, int, int, int]
    k: tuple[int, int, int, int]
    v: tuple[int, int, int, int]
    mask: tuple[int, int, int, int] | None
    scale: float

    def template_params(self, bq: int, tpr: int, bk: int) -> dict:
        """What both backends' templates take: the geometry, and the tiling of bq query rows,
        tpr threads per row and bk keys per block (scale and storage types are the caller's)."""
        return dict(
            B=self.b, H=self.h, M=self.m, N=self.n, D=self.d, DV=self.dv,
            Q=self.q, K=self.k, V=self.v, MS=self.mask,
            BQ=bq, TPR=tpr, BK=bk, CPT=(self.dv + tpr - 1) // tpr, k_key_fast=self.k[3] == 1,
        )  # fmt: skip


def attention(b) -> AttentionGeometry:
    """The geometry of a tinydl.Attention node (backends/fusion.py: fuse_attention)."""
    out = b.out().shape
    batch = (1,) * (4 - len(out)) + tuple(out[:-2])

    def view(i: int) -> tuple[list[int], tuple[int, ...]]:
        shape = b.info(i).shape
        strides = strides_of(shape)
        perm = b.node.meta["perms"][i] or range(len(shape))
        dims = [1] * (4 - len(shape)) + [shape[p] for p in perm]
        st = [0] * (4 - len(shape)) + [strides[p] for p in perm]
        st[:2] = [0 if d == 1 else s for d, s in zip(dims[:2], st[:2], strict=True)]
        return dims, tuple(st)

    (q, sq), (k, sk), (v, sv) = view(0), view(1), view(2)
    mask = None
    if b.has(3):
        scores = (*batch, q[2], k[3])
        mask = tuple(broadcast_strides(b.info(3).shape, scores))
    return AttentionGeometry(
        *batch, q[2], k[3], q[3], v[3], sq, sk, sv, mask, float(b.node.meta["scale"])
    )


def roi_align(b) -> dict:
    """RoiAlign's template parameters: sizes, mode and the coordinate transform (the rois and
    batch indices are read at run time; each roi's sampling grid is computed by the kernel)."""
    n, c, h, w = b.info(0).shape
    attrs = b.attrs
    half = attrs["coordinate_transformation_mode"] == "half_pixel"
    return {
        "N": n,
        "C": c,
        "H": h,
        "W": w,
        "R": b.info(1).shape[0],
        "OH": attrs["output_height"],
        "OW": attrs["output_width"],
        "total": b.info(1).shape[0] * c * attrs["output_height"] * attrs["output_width"],
        "mode": attrs["mode"],
        "ratio": attrs["sampling_ratio"],
        "half": half,
        "scale": float(attrs["spatial_scale"]),
        "offset": 0.5 if half else 0.0,
    }


def mediapipe(b) -> dict:
    """Template parameters of MediaPipe's TransformTensorBilinear and Landmarks2TransformMatrix
    (tinydl/ops/mediapipe.py): the sizes and attributes; matrices and landmarks are read at
    run time. `total` counts the threads."""
    attrs, shape = b.attrs, b.info(0).shape
    params = {"op": b.node.op, "OH": attrs["output_height"], "OW": attrs["output_width"]}
    if b.node.op == "tinydl.TransformTensorBilinear":
        n, c, h, w = shape
        total = n * c * params["OH"] * params["OW"]
        return {**params, "N": n, "C": c, "H": h, "W": w, "MB": b.info(1).shape[0], "total": total}
    return {
        **params,
        "N": shape[0],
        "L": shape[1],
        "total": shape[0],
        "left": attrs["left_rotation_idx"],
        "right": attrs["right_rotation_idx"],
        "subset": list(attrs["subset_idxs"]),
        "target": repr(float(attrs["target_rotation_radians"])),
        "scale_x": repr(float(attrs["scale_x"])),
        "scale_y": repr(float(attrs["scale_y"])),
    }


# Pooling windows of more taps than this run as reductions, when they tile the input.
MAX_TAPS = 1024


def pool_tiles(attrs: dict) -> bool:
    """True when pooling windows tile the input (strides equal to the window, no padding or
    dilation): each element is read by at most one window."""
    k = attrs["kernel_shape"]
    return (
        list(attrs.get("strides") or [1] * len(k)) == list(k)
        and not any(attrs.get("pads") or [])
        and all(d == 1 for d in (attrs.get("dilations") or [1] * len(k)))
        and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
        and not attrs.get("ceil_mode", 0)
    )


def pool_tiles_view(b) -> tuple[list[int], list[int], tuple[int, ...]]:
    """Tiled pooling as a reduction: the input read as (N, C, out_1, k_1, out_2, k_2, ...) —
    dims, element strides — and the k_i axes to reduce (rows past the last window are skipped)."""
    shape, kernel = b.info(0).shape, b.attrs["kernel_shape"]
    spatial = shape[2:]
    size = math.prod(spatial)
    dims, strides, axes = list(shape[:2]), [shape[1] * size, size], []
    for i, (d, k) in enumerate(zip(spatial, kernel, strict=True)):
        st = math.prod(spatial[i + 1 :])
        dims += [d // k, k]
        strides += [k * st, st]
        axes.append(len(dims) - 1)
    return dims, strides, tuple(axes)
