"""CumSum, OneHot, ScatterElements and ScatterND: a thread per output element (per line for
CumSum), reading indices and values at run time (geometry in backends/scatters.py)."""

from __future__ import annotations

from tinydl.backends import scatters
from tinydl.backends.webgpu.kernels import ctype, grid, kernel

WG = 256


def _dispatch(b, template: str, bindings: list, threads: int, **params) -> None:
    if threads == 0:
        return
    g = grid(threads, WG)
    b.dispatch(template, bindings, g, wg=WG, gx=g[0], **params)


@kernel("CumSum", supports=scatters.cumsum_supports)
def cumsum(b):
    geo = scatters.cumsum(b)
    if geo["L"] == 0:
        return
    _dispatch(
        b,
        "cumsum.wgsl",
        [b.inputs[0], b.outputs[0]],
        geo["lines"],
        acc=ctype(b.info(0).dtype),
        in_t=b.info(0).stype,
        out_t=b.out().stype,
        **geo,
    )


@kernel("OneHot", supports=scatters.one_hot_supports)
def one_hot(b):
    geo = scatters.one_hot(b)
    _dispatch(
        b,
        "onehot.wgsl",
        [b.inputs[0], b.inputs[2], b.outputs[0]],
        geo["total"],
        idx_t=b.info(0).stype,
        val_t=b.info(2).stype,
        out_t=b.out().stype,
        **geo,
    )


def _scatter(b, geo: dict) -> None:
    acc = ctype(b.info(0).dtype)
    float_expr, int_expr = scatters.WGSL_COMBINE[geo["reduction"]]
    _dispatch(
        b,
        "scatter.wgsl",
        [b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0]],
        geo["total"],
        acc=acc,
        combine=int_expr if acc == "i32" else float_expr,
        data_t=b.info(0).stype,
        upd_t=b.info(2).stype,
        out_t=b.out().stype,
        **geo,
    )


@kernel("ScatterElements")
def scatter_elements(b):
    _scatter(b, scatters.scatter_elements(b))


@kernel("ScatterND", supports=scatters.scatter_nd_any_supports)
def scatter_nd(b):
    geo = scatters.scatter_nd(b)
    if geo["reduction"] != "none" or geo["scan"] <= scatters.SCATTER_ND_MAX:
        _scatter(b, geo)
        return
    # Too many index tuples for each output element to scan: copy the data, then a thread per
    # updated element writes it (MViTv2's relative positions: 77k to 1.2M tuples).
    data, idx, upd, y = b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0]
    types = dict(data_t=b.info(0).stype, upd_t=b.info(2).stype, out_t=b.out().stype)
    _dispatch(b, "scatter_tuples.wgsl", [data, y], geo["total"], copy=True, **types, **geo)
    _dispatch(b, "scatter_tuples.wgsl", [idx, upd, y], geo["scan"] * geo["inner"], copy=False,
              **types, **geo)  # fmt: skip


def emit_gather_nd(b) -> None:
    """GatherND whose indices are computed at run time (gathers.register)."""
    geo = scatters.gather_nd(b)
    out = b.out()
    _dispatch(
        b,
        "gather_nd.wgsl",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        geo["total"],
        ctype=ctype(out.dtype),
        in_t=b.info(0).stype,
        out_t=out.stype,
        **geo,
    )
