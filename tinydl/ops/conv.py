"""Convolutions: Conv and ConvTranspose over 1-D, 2-D and 3-D spatial axes (NCHW layout)."""

import math
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinydl.ir.graph import Dim
from tinydl.ops.base import Attr, InferContext, TensorType, op

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

# Largest im2col block built at once; bounds memory on large images (bytes).
_IM2COL_BYTES = 64 << 20


def window_attrs(attrs: dict, kernel: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """strides, dilations and pads (begins, then ends) with defaults, checked against the kernel."""
    n = len(kernel)
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    pads = list(attrs.get("pads") or [0] * (2 * n))
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        raise ValueError(
            f"{n} spatial axes need {n} strides, {n} dilations and {2 * n} pads, "
            f"got {strides}, {dilations}, {pads}"
        )
    if attrs.get("auto_pad", "NOTSET") not in AUTO_PADS:
        raise ValueError(f"auto_pad must be one of {AUTO_PADS}, got {attrs['auto_pad']!r}")
    if min(strides + dilations, default=1) < 1:
        raise ValueError(f"strides and dilations must be >= 1, got {strides}, {dilations}")
    return strides, dilations, pads


def window_geometry(
    size: Sequence[Dim],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    auto_pad: str,
    ceil_mode: bool = False,
) -> list[tuple[int | None, int | None, int | None]]:
    """(pad_begin, pad_end, output size) per spatial axis of a sliding window (None: unknown)."""
    n = len(kernel)
    geo = []
    for i in range(n):
        dim, s = size[i], strides[i]
        span = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if not isinstance(dim, int):
                geo.append((None, None, None))
                continue
            out = -(-dim // s)
            total = max(0, (out - 1) * s + span - dim)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            geo.append((begin, total - begin, out))
            continue
        begin, end = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + n])
        if not isinstance(dim, int):
            geo.append((begin, end, None))
            continue
        room = dim + begin + end - span
        if room < 0:
            raise ValueError(f"window of {span} does not fit axis of {dim} padded by {begin}+{end}")
        out = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (out - 1) * s >= dim + begin:
            out -= 1  # a window may not start inside the end padding
        geo.append((begin, end, out))
    return geo


def taps(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """For each kernel offset, the strided view of x's last spatial axes that it touches."""
    for tap in np.ndindex(*kernel):
        index = tuple(
            slice(t * d, t * d + s * (o - 1) + 1, s)
            for t, d, s, o in zip(tap, dilations, strides, out, strict=True)
        )
        yield tap, x[(..., *index)]


def _correlate(xp: np.ndarray, w: np.ndarray, strides, dilations, group: int) -> np.ndarray:
    """Grouped cross-correlation of a padded input (N, C, *S) with weights (M, C/group, *K)."""
    n, c, *size = xp.shape
    m, cg, *kernel = w.shape
    mg, nd = m // group, len(kernel)
    out = [(size[i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nd)]
    if 0 in (n, m, *out):
        return np.zeros((n, m, *out), xp.dtype)
    if cg == 1:
        # One input channel per group (depthwise): a weighted sum of shifted views beats im2col.
        src = xp.reshape(n, group, 1, *size)
        wk = w.reshape(group, mg, *kernel)
        y = np.zeros((n, group, mg, *out), xp.dtype)
        for tap, view in taps(src, kernel, strides, dilations, out):
            y += view * wk[(slice(None), slice(None), *tap)].reshape(group, mg, *[1] * nd)
        return y.reshape(n, m, *out)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    win = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))
    win = win[
        (..., *[slice(None, None, s) for s in strides], *[slice(None, None, d) for d in dilations])
    ]
    row_bytes = n * cg * math.prod(kernel) * math.prod(out[1:]) * xp.itemsize
    rows = max(1, _IM2COL_BYTES // max(1, row_bytes))
    # Columns as (N, C/group * K, pixels): the product lands in NCHW order with no transpose.
    perm = (0, 1, *range(2 + nd, 2 + 2 * nd), *range(2, 2 + nd))
    y = np.empty((n, m, *out), xp.dtype)
    for g in range(group):
        wg = w[g * mg : (g + 1) * mg].reshape(mg, -1)
        for r in range(0, out[0], rows):
            block = win[:, g * cg : (g + 1) * cg, r : r + rows].transpose(perm)
            cols = block.reshape(n, wg.shape[1], -1)
            y[:, g * mg : (g + 1) * mg, r : r + rows] = (wg @ cols).reshape(n, mg, -1, *out[1:])
    return y


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    # float16 accumulates in float32 (as GPU kernels do); the result is cast back.
    return np.promote_types(dtype, np.float32)


def _kernel(attrs: dict, w_shape) -> list:
    kernel = list(w_shape[2:])
    given = attrs.get("kernel_shape")
    if given is not None:
        if len(given) != len(kernel) or any(
            isinstance(k, int) and k != g for k, g in zip(kernel, given, strict=True)
        ):
            raise ValueError(f"kernel_shape {given} does not match weight shape {list(w_shape)}")
        kernel = list(given)
    return kernel


_CONV_ATTRS = {
    "auto_pad": Attr("string", "NOTSET"),
    "dilations": Attr("ints", None),
    "group": Attr("int", 1),
    "kernel_shape": Attr("ints", None),
    "pads": Attr("ints", None),
    "strides": Attr("ints", None),
}


def _check_channels(ctx: InferContext, what: str, x_c: Dim, expected: Dim) -> None:
    if isinstance(x_c, int) and isinstance(expected, int) and x_c != expected:
        raise ctx.fail(f"{what}: expected {expected} input channels, got {x_c}")


def _conv_infer(ctx: InferContext) -> list[TensorType]:
    x, w, group = ctx.shape(0), ctx.shape(1), ctx.attrs["group"]
    if x is None or w is None:
        return [TensorType(ctx.dtype(0), None)]
    if len(x) < 3 or len(w) != len(x):
        raise ctx.fail(f"input rank {len(x)} and weight rank {len(w)} must be equal and >= 3")
    kernel = _kernel(ctx.attrs, w)
    _check_channels(
        ctx,
        f"weight {list(w)} with group={group}",
        x[1],
        w[1] * group if isinstance(w[1], int) else None,
    )
    if isinstance(w[0], int) and w[0] % group:
        raise ctx.fail(f"output channels {w[0]} must be divisible by group={group}")
    if ctx.has(2) and ctx.shape(2) is not None and ctx.shape(2) != (w[0],):
        raise ctx.fail(f"bias shape: expected ({w[0]},), got {ctx.shape(2)}")
    if not all(isinstance(k, int) for k in kernel):
        return [TensorType(ctx.dtype(0), (x[0], w[0], *[None] * len(kernel)))]
    strides, dilations, pads = window_attrs(ctx.attrs, kernel)
    geo = window_geometry(x[2:], kernel, strides, dilations, pads, ctx.attrs["auto_pad"])
    return [TensorType(ctx.dtype(0), (x[0], w[0], *[o for _, _, o in geo]))]


@op("Conv", types="float", same_dtype="all", inputs=(2, 3), attrs=_CONV_ATTRS, infer=_conv_infer)
def conv(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """Grouped N-D cross-correlation with optional bias."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    kernel = _kernel({"kernel_shape": kernel_shape}, w.shape)
    strides, dilations, pads = window_attrs(attrs, kernel)
    if x.shape[1] != w.shape[1] * group:
        raise ValueError(f"expected {w.shape[1] * group} input channels, got {x.shape[1]}")
    geo = window_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    ct = _compute_dtype(x.dtype)
    xp = np.pad(x.astype(ct, copy=False), [(0, 0), (0, 0), *[(b0, e0) for b0, e0, _ in geo]])
    y = _correlate(xp, w.astype(ct, copy=False), strides, dilations, group)
    if b is not None:
        y += b.astype(ct).reshape(1, -1, *[1] * len(kernel))
    return y.astype(x.dtype, copy=False)


def _transpose_geometry(
    size, kernel, strides, dilations, pads, output_padding, output_shape, auto_pad
) -> list[tuple[int | None, int | None, int | None]]:
    """(crop_begin, crop_end, output size) per spatial axis of a transposed convolution.

    Odd total padding: SAME_UPPER crops the extra one at the end, otherwise at the start (the spec).
    """
    n = len(kernel)
    if output_shape is not None:
        output_shape = list(output_shape)[-n:]
    geo = []
    for i in range(n):
        dim = size[i]
        if not isinstance(dim, int):
            out = output_shape[i] if output_shape is not None else None
            geo.append((None, None, out))
            continue
        full = strides[i] * (dim - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = output_shape[i] if output_shape is not None else dim * strides[i]
            total = max(0, full - out)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            geo.append((begin, total - begin, out))
        else:
            begin, end = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + n])
            geo.append((begin, end, full - begin - end))
    return geo


def _transpose_attrs(attrs: dict, kernel) -> tuple[list[int], list[int], list[int], list[int]]:
    strides, dilations, pads = window_attrs(attrs, kernel)
    output_padding = list(attrs.get("output_padding") or [0] * len(kernel))
    if len(output_padding) != len(kernel):
        raise ValueError(f"output_padding needs {len(kernel)} values, got {output_padding}")
    output_shape = attrs.get("output_shape")
    if output_shape is not None and len(output_shape) not in (len(kernel), len(kernel) + 2):
        raise ValueError(f"output_shape needs {len(kernel)} spatial sizes, got {output_shape}")
    return strides, dilations, pads, output_padding


def _conv_transpose_infer(ctx: InferContext) -> list[TensorType]:
    x, w, group = ctx.shape(0), ctx.shape(1), ctx.attrs["group"]
    if x is None or w is None:
        return [TensorType(ctx.dtype(0), None)]
    if len(x) < 3 or len(w) != len(x):
        raise ctx.fail(f"input rank {len(x)} and weight rank {len(w)} must be equal and >= 3")
    _check_channels(ctx, f"weight {list(w)}", x[1], w[0])
    kernel = _kernel(ctx.attrs, w)
    m = w[1] * group if isinstance(w[1], int) else None
    if not all(isinstance(k, int) for k in kernel):
        return [TensorType(ctx.dtype(0), (x[0], m, *[None] * len(kernel)))]
    strides, dilations, pads, output_padding = _transpose_attrs(ctx.attrs, kernel)
    geo = _transpose_geometry(
        x[2:],
        kernel,
        strides,
        dilations,
        pads,
        output_padding,
        ctx.attrs["output_shape"],
        ctx.attrs["auto_pad"],
    )
    return [TensorType(ctx.dtype(0), (x[0], m, *[o for _, _, o in geo]))]


@op(
    "ConvTranspose",
    types="float",
    inputs=(2, 3),
    same_dtype="all",
    infer=_conv_transpose_infer,
    attrs={
        **_CONV_ATTRS,
        "output_padding": Attr("ints", None),
        "output_shape": Attr("ints", None),
    },
)
def conv_transpose(
    x,
    w,
    b=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    output_padding,
    output_shape,
    pads,
    strides,
):
    """Transposed convolution: each input pixel scatters its weighted kernel into the output."""
    attrs = dict(
        auto_pad=auto_pad,
        dilations=dilations,
        pads=pads,
        strides=strides,
        output_padding=output_padding,
        output_shape=output_shape,
    )
    kernel = _kernel({"kernel_shape": kernel_shape}, w.shape)
    strides, dilations, pads, output_padding = _transpose_attrs(attrs, kernel)
    n, c, *size = x.shape
    if c != w.shape[0]:
        raise ValueError(f"expected {w.shape[0]} input channels, got {c}")
    cg, mg, nd = c // group, w.shape[1], len(kernel)
    geo = _transpose_geometry(
        size, kernel, strides, dilations, pads, output_padding, output_shape, auto_pad
    )
    full = [
        s * (i - 1) + (k - 1) * d + 1
        for s, i, k, d in zip(strides, size, kernel, dilations, strict=True)
    ]
    room = [max(f + p, b0 + o) for f, p, (b0, _, o) in zip(full, output_padding, geo, strict=True)]
    ct = _compute_dtype(x.dtype)
    y = np.zeros((n, group, mg, *room), ct)
    for g in range(group):
        xg, wg = x[:, g * cg : (g + 1) * cg].astype(ct), w[g * cg : (g + 1) * cg].astype(ct)
        cols = np.tensordot(xg, wg, axes=([1], [0]))  # (N, *size, M/group, *kernel)
        for tap, view in taps(y[:, g], kernel, strides, dilations, size):
            view += np.moveaxis(cols[(..., *tap)], -1, 1)
    y = y[(..., *[slice(b0, b0 + o) for b0, _, o in geo])].reshape(
        n, group * mg, *[o for *_, o in geo]
    )
    if b is not None:
        y = y + b.astype(ct).reshape(1, -1, *[1] * nd)
    return y.astype(x.dtype, copy=False)
