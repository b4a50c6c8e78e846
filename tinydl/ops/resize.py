"""Spatial rearrangement: DepthToSpace, Resize (nearest, N-linear, cubic) and Pad."""

import numpy as np

from tinydl.ir.graph import Dim
from tinydl.ops.base import Attr, InferContext, TensorType, normalize_axis, op


def _depth_to_space_infer(ctx: InferContext) -> list[TensorType]:
    x, bs = ctx.shape(0), ctx.attrs["blocksize"]
    if ctx.attrs["mode"] not in ("DCR", "CRD"):
        raise ctx.fail(f"mode must be DCR or CRD, got {ctx.attrs['mode']!r}")
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    if len(x) != 4:
        raise ctx.fail(f"input must be 4-D (N, C, H, W), got shape {x}")
    n, c, h, w = x
    if isinstance(c, int) and c % (bs * bs):
        raise ctx.fail(f"channels must be a multiple of blocksize^2 = {bs * bs}, got {c}")

    def scaled(d: Dim, k: int) -> Dim:
        return d * k if isinstance(d, int) else None

    c_out = c // (bs * bs) if isinstance(c, int) else None
    return [TensorType(ctx.dtype(0), (n, c_out, scaled(h, bs), scaled(w, bs)))]


@op(
    "DepthToSpace",
    infer=_depth_to_space_infer,
    attrs={"blocksize": Attr("int"), "mode": Attr("string", "DCR")},
)
def depth_to_space(x, *, blocksize, mode):
    """Move blocks of channels into bs x bs spatial tiles (DCR: depth-column-row order)."""
    n, c, h, w = x.shape
    bs = blocksize
    if mode == "DCR":
        t = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        t = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"mode must be DCR or CRD, got {mode!r}")
    return t.reshape(n, c // (bs * bs), h * bs, w * bs)


_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _given(a) -> bool:
    return a is not None and np.size(a) > 0


def _resize_targets(shape, scales, sizes, axes, policy) -> tuple[list[int], list, list[Dim]]:
    """Resized axes, and per axis of `shape` its scale and output size (None where unknown)."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {axes} repeat an axis")
    if _given(scales) == _given(sizes):
        raise ValueError("exactly one of scales and sizes must be given")
    values = np.ravel(scales if _given(scales) else sizes)
    if len(values) != len(axes):
        raise ValueError(
            f"expected {len(axes)} scales or sizes (one per resized axis), got {len(values)}"
        )
    scale: list = [1.0] * rank
    out: list[Dim] = list(shape)
    known = all(isinstance(shape[a], int) for a in axes)
    if _given(scales):
        for a, s in zip(axes, values, strict=True):
            if s <= 0:
                raise ValueError(f"scales must be positive, got {list(values)}")
            scale[a] = float(s)
            out[a] = int(np.floor(shape[a] * float(s))) if isinstance(shape[a], int) else None
    elif policy == "stretch":
        for a, n in zip(axes, values, strict=True):
            out[a] = int(n)
            scale[a] = int(n) / shape[a] if isinstance(shape[a], int) else None
    elif policy in ("not_larger", "not_smaller"):
        ratios = [int(n) / shape[a] for a, n in zip(axes, values, strict=True)] if known else None
        r = None if ratios is None else min(ratios) if policy == "not_larger" else max(ratios)
        for a in axes:
            scale[a] = r
            out[a] = None if r is None else int(np.floor(r * shape[a] + 0.5))
    else:
        raise ValueError(
            f"keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, got {policy!r}"
        )
    return axes, scale, out


def _resize_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.shape(0)
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    scales, sizes = ctx.const(2), ctx.const(3)
    if (ctx.has(2) and scales is None) or (ctx.has(3) and sizes is None):
        return [TensorType(ctx.dtype(0), (None,) * len(x))]
    _check_resize_attrs(ctx.attrs)
    _, _, out = _resize_targets(
        x, scales, sizes, ctx.attrs["axes"], ctx.attrs["keep_aspect_ratio_policy"]
    )
    return [TensorType(ctx.dtype(0), tuple(out))]


def _check_resize_attrs(attrs: dict) -> None:
    if attrs["mode"] not in ("nearest", "linear", "cubic"):
        raise ValueError(f"mode must be nearest, linear or cubic, got {attrs['mode']!r}")
    if attrs["coordinate_transformation_mode"] not in _COORDINATE_MODES:
        raise ValueError(
            f"coordinate_transformation_mode must be one of {_COORDINATE_MODES}, "
            f"got {attrs['coordinate_transformation_mode']!r}"
        )
    if attrs["nearest_mode"] not in _NEAREST_MODES:
        raise ValueError(
            f"nearest_mode must be one of {_NEAREST_MODES}, got {attrs['nearest_mode']!r}"
        )
    if attrs["antialias"]:
        raise ValueError("antialias=1 is not supported")


def _source_coords(
    n_out: int, n_in: int, scale: float, mode: str, roi: tuple[float, float]
) -> np.ndarray:
    """Input coordinate of each output index along one axis."""
    o = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        return n_in / 2 * (1 - adjustment) + (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(o)
    if mode == "align_corners":
        return o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o / scale
    start, end = roi
    if n_out > 1:
        return start * (n_in - 1) + o * (end - start) * (n_in - 1) / (n_out - 1)
    return np.full_like(o, 0.5 * (start + end) * (n_in - 1))


def _nearest(c: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(c - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(c + 0.5)
    return np.floor(c) if mode == "floor" else np.ceil(c)


def _cubic_weights(t: np.ndarray, a: float) -> list[np.ndarray]:
    """Keys cubic convolution weights of the taps at offsets -1, 0, 1, 2 for fraction t."""

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _along(v: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """Reshape a 1-D array to broadcast along `axis` of a rank-`rank` array."""
    return v.reshape([-1 if i == axis else 1 for i in range(rank)])


def _resample(x: np.ndarray, axis: int, c: np.ndarray, attrs: dict) -> np.ndarray:
    """Interpolate x along one axis at input coordinates c."""
    n = x.shape[axis]
    mode = attrs["mode"]
    if mode == "nearest":
        idx = np.clip(_nearest(c, attrs["nearest_mode"]), 0, n - 1).astype(np.intp)
        return np.take(x, idx, axis=axis)
    if mode == "linear":
        c = np.clip(c, 0, n - 1)
        i0 = np.floor(c).astype(np.intp)
        i1 = np.minimum(i0 + 1, n - 1)
        w = _along((c - i0).astype(x.dtype), axis, x.ndim)
        return np.take(x, i0, axis=axis) * (1 - w) + np.take(x, i1, axis=axis) * w
    base = np.floor(c).astype(np.intp)
    taps = [base + k for k in (-1, 0, 1, 2)]
    weights = _cubic_weights(c - base, attrs["cubic_coeff_a"])
    if attrs["exclude_outside"]:
        weights = [np.where((i >= 0) & (i < n), w, 0.0) for i, w in zip(taps, weights, strict=True)]
        total = sum(weights)
        weights = [w / total for w in weights]
    y = 0
    for i, w in zip(taps, weights, strict=True):
        y = y + np.take(x, np.clip(i, 0, n - 1), axis=axis) * _along(
            w.astype(x.dtype), axis, x.ndim
        )
    return y


@op(
    "Resize",
    inputs=(1, 4),
    infer=_resize_infer,
    attrs={
        "antialias": Attr("int", 0),
        "axes": Attr("ints", None),
        "coordinate_transformation_mode": Attr("string", "half_pixel"),
        "cubic_coeff_a": Attr("float", -0.75),
        "exclude_outside": Attr("int", 0),
        "extrapolation_value": Attr("float", 0.0),
        "keep_aspect_ratio_policy": Attr("string", "stretch"),
        "mode": Attr("string", "nearest"),
        "nearest_mode": Attr("string", "round_prefer_floor"),
    },
)
def resize(x, roi=None, scales=None, sizes=None, **attrs):
    """Resample the resized axes one at a time (separable nearest, N-linear or cubic)."""
    _check_resize_attrs(attrs)
    axes, scale, out = _resize_targets(
        x.shape, scales, sizes, attrs["axes"], attrs["keep_aspect_ratio_policy"]
    )
    ctm = attrs["coordinate_transformation_mode"]
    roi = np.ravel(roi).astype(np.float64) if _given(roi) else None
    floating = np.issubdtype(x.dtype, np.floating)
    y = x if attrs["mode"] == "nearest" else x.astype(np.promote_types(x.dtype, np.float32))
    outside = np.zeros((1,) * x.ndim, bool)
    for k, a in enumerate(axes):
        if out[a] == x.shape[a] and scale[a] == 1.0 and ctm != "tf_crop_and_resize":
            continue
        bounds = (0.0, 1.0) if roi is None else (roi[k], roi[k + len(roi) // 2])
        c = _source_coords(out[a], x.shape[a], scale[a], ctm, bounds)
        if ctm == "tf_crop_and_resize":
            outside = outside | _along((c < 0) | (c > x.shape[a] - 1), a, x.ndim)
        y = _resample(y, a, c, attrs)
    if outside.any():
        y = np.where(outside, y.dtype.type(attrs["extrapolation_value"]), y)
    if not floating and attrs["mode"] != "nearest":
        y = np.rint(y)
    return y.astype(x.dtype, copy=False)


def _pad_widths(rank: int, pads, axes) -> list[tuple[int, int]]:
    axes = range(rank) if axes is None else [normalize_axis(int(a), rank) for a in np.ravel(axes)]
    pads = [int(p) for p in np.ravel(pads)]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"expected {2 * len(axes)} pads (begins then ends), got {len(pads)}")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    return widths


def _pad_infer(ctx: InferContext) -> list[TensorType]:
    x, pads = ctx.shape(0), ctx.const(1)
    if ctx.attrs["mode"] not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.fail(f"mode must be constant, reflect, edge or wrap, got {ctx.attrs['mode']!r}")
    if x is None:
        return [TensorType(ctx.dtype(0), None)]
    if pads is None or (ctx.has(3) and ctx.const(3) is None):
        return [TensorType(ctx.dtype(0), (None,) * len(x))]
    widths = _pad_widths(len(x), pads, ctx.const(3))
    out = tuple(
        d + b + e if isinstance(d, int) else None if b or e else d
        for d, (b, e) in zip(x, widths, strict=True)
    )
    if any(isinstance(d, int) and d < 0 for d in out):
        raise ctx.fail(f"pads {list(np.ravel(pads))} crop more than the input {x} holds")
    return [TensorType(ctx.dtype(0), out)]


@op(
    "Pad",
    types={1: "index"},
    inputs=(2, 4),
    attrs={"mode": Attr("string", "constant")},
    infer=_pad_infer,
)
def pad(x, pads, constant_value=None, axes=None, *, mode):
    """Pad (or, with negative pads, crop) each axis; constant, reflect, edge or wrap."""
    widths = _pad_widths(x.ndim, pads, axes)
    x = x[
        tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(x.shape, widths, strict=True))
    ]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        value = constant_value.item() if _given(constant_value) else 0
        return np.pad(x, widths, mode="constant", constant_values=value)
    if mode not in ("reflect", "edge", "wrap"):
        raise ValueError(f"mode must be constant, reflect, edge or wrap, got {mode!r}")
    return np.pad(x, widths, mode=mode)


def axis_taps(n_in: int, n_out: int, scale: float, attrs: dict, roi) -> tuple:
    """How a GPU kernel computes Resize along one axis: (indices [n_out, T], weights [n_out, T],
    outside [n_out]), the T input positions each output position reads, their weights, and
    whether it falls outside the crop (tf_crop_and_resize)."""
    ctm = attrs["coordinate_transformation_mode"]
    c = _source_coords(n_out, n_in, scale, ctm, roi)
    outside = np.zeros(n_out, bool)
    if ctm == "tf_crop_and_resize":
        outside = (c < 0) | (c > n_in - 1)
    mode = attrs["mode"]
    if mode == "nearest":
        idx = np.clip(_nearest(c, attrs["nearest_mode"]), 0, n_in - 1).astype(np.int64)
        return idx[:, None], np.ones((n_out, 1)), outside
    if mode == "linear":
        c = np.clip(c, 0, n_in - 1)
        i0 = np.floor(c).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        w = (c - i0).astype(np.float32)
        return np.stack([i0, i1], 1), np.stack([1 - w, w], 1), outside
    base = np.floor(c).astype(np.int64)
    taps = [base + k for k in (-1, 0, 1, 2)]
    weights = _cubic_weights(c - base, attrs["cubic_coeff_a"])
    if attrs["exclude_outside"]:
        weights = [
            np.where((i >= 0) & (i < n_in), w, 0.0) for i, w in zip(taps, weights, strict=True)
        ]
        total = sum(weights)
        weights = [w / total for w in weights]
    idx = np.stack([np.clip(i, 0, n_in - 1) for i in taps], 1)
    return idx, np.stack([w.astype(np.float32) for w in weights], 1), outside


# -- GridSample ------------------------------------------------------------------------------------

# Opset 16's names of the modes (2-D) and opset 20's (any rank).
GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
               "nearest": "nearest"}  # fmt: skip
_GRID_PADDING = ("zeros", "border", "reflection")


def _grid_sample_infer(ctx: InferContext) -> list[TensorType]:
    mode, padding = ctx.attrs["mode"], ctx.attrs["padding_mode"]
    if mode not in GRID_MODES:
        raise ValueError(f"mode must be one of {sorted(GRID_MODES)}, got {mode!r}")
    if padding not in _GRID_PADDING:
        raise ValueError(f"padding_mode must be one of {list(_GRID_PADDING)}, got {padding!r}")
    x, grid = ctx.shape(0), ctx.shape(1)
    if x is None or grid is None:
        return [TensorType(ctx.dtype(0), None)]
    r = len(x) - 2
    if r < 1 or len(grid) != r + 2:
        raise ctx.fail(f"grid must have rank {len(x)} for an input of rank {len(x)}, got {grid}")
    if isinstance(grid[-1], int) and grid[-1] != r:
        raise ctx.fail(f"grid's last axis must hold {r} coordinates, got {grid[-1]}")
    if GRID_MODES[mode] == "cubic" and r != 2:
        raise ctx.fail(f"cubic GridSample is 2-D only, got {r}-D")
    return [TensorType(ctx.dtype(0), (x[0], x[1], *grid[1:-1]))]


def _grid_reflect(x, lo: float, hi: float):
    """x reflected at the borders lo and hi until inside them (ONNX's reference, vectorized)."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = lo - x, x - hi
    out = x.copy()
    for dx, near, far, mask in ((below, lo, hi, x < lo), (above, hi, lo, x > hi)):
        n = np.floor(dx / span)
        r = dx - n * span
        even = (n % 2) == 0
        sign = 1 if near == lo else -1
        out = np.where(mask & even, near + sign * r, out)
        out = np.where(mask & ~even, far - sign * r, out)
    return out


@op(
    "GridSample",
    types="float",
    inputs=2,
    same_dtype=(0, 1),
    infer=_grid_sample_infer,
    attrs={
        "align_corners": Attr("int", 0),
        "mode": Attr("string", "linear"),
        "padding_mode": Attr("string", "zeros"),
    },
)
def grid_sample(x, grid, *, align_corners, mode, padding_mode):
    """Output (n, c, o...) samples x[n, c] at the grid's point (n, o...), its coordinates in
    [-1, 1] (the last one the innermost axis), by nearest (rounded half to even), linear or
    cubic (2-D) interpolation, taps outside the input zero, clamped to its border or reflected
    at it; the coordinates mapped as ONNX's reference and PyTorch's grid_sample map them."""
    mode = GRID_MODES[mode]
    dims = x.shape[2:]
    r = len(dims)
    g = grid.astype(np.float32)
    coords, bounds = [], []
    for i, d in enumerate(dims):
        n = g[..., r - 1 - i]
        if align_corners:
            c, lo, hi = (n + 1) / 2 * (d - 1), 0.0, d - 1.0
        else:
            c, lo, hi = ((n + 1) * d - 1) / 2, -0.5, d - 0.5
        c = c.astype(np.float32)
        if mode == "nearest":
            c = np.rint(c)
        outside = (c < lo) | (c > hi)
        if padding_mode == "border":
            c = np.where(outside, np.clip(c, 0, d - 1), c)
        elif padding_mode == "reflection":
            c = np.where(outside, _grid_reflect(c, lo, hi), c)
        coords.append(c.astype(np.float32))
        bounds.append((lo, hi))
    # Per axis: the taps (index arrays) and their weights.
    axes = []
    for c, d, (lo, hi) in zip(coords, dims, bounds, strict=True):
        if mode == "nearest":
            taps = [(c.astype(np.int64), np.ones_like(c))]
        else:
            f = np.floor(c)
            t = (c - f).astype(np.float32)
            base = f.astype(np.int64)
            if mode == "linear":
                taps = [(base, 1 - t), (base + 1, t)]
            else:
                taps = [(base + k - 1, w) for k, w in enumerate(_cubic_weights(t, -0.75))]
        fixed = []
        for idx, w in taps:
            valid = (idx >= 0) & (idx < d)
            if padding_mode == "border":
                idx = np.clip(idx, 0, d - 1)
            elif padding_mode == "reflection":
                idx = np.trunc(_grid_reflect(idx.astype(np.float64), lo, hi)).astype(np.int64)
                idx = np.clip(idx, 0, d - 1)
            if padding_mode == "zeros":
                w = np.where(valid, w, 0)
                idx = np.clip(idx, 0, d - 1)
            fixed.append((idx, w))
        axes.append(fixed)
    nb = np.arange(x.shape[0]).reshape((-1,) + (1,) * (g.ndim - 2))
    xs = np.moveaxis(x, 1, -1)  # (N, *dims, C): a gather per tap combination
    acc = np.zeros((*g.shape[:-1], x.shape[1]), np.float64)
    for combo in np.ndindex(*(len(a) for a in axes)):
        weight = np.ones(g.shape[:-1], np.float64)
        index = [nb]
        for a, k in zip(axes, combo, strict=True):
            idx, w = a[k]
            weight = weight * w
            index.append(idx)
        acc += weight[..., None] * xs[tuple(index)]
    return np.moveaxis(acc, -1, 1).astype(x.dtype)
