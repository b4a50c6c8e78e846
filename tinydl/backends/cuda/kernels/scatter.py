"""CumSum, OneHot, ScatterElements and ScatterND: a thread per output element (per line for
CumSum), reading indices and values at run time (geometry in backends/scatters.py)."""

from __future__ import annotations

from tinydl.backends import scatters
from tinydl.backends.cuda.kernels import FLOATS, blocks, kernel, load, store

BLOCK = 256


def _acc(dtype: str) -> str:
    """The C type a kernel computes in: float for floats, long long for integers and bool."""
    return "float" if dtype in FLOATS else "long long"


def _load(info, expr: str) -> str:
    return load(info.ctype, expr) if info.dtype in FLOATS else f"(long long)({expr})"


def _store(info, expr: str) -> str:
    return store(info.ctype, expr) if info.dtype in FLOATS else f"({info.ctype})({expr})"


def _launch(b, template: str, args: list, threads: int, **params) -> None:
    if threads == 0:
        return
    b.launch(template, args, blocks(threads, BLOCK), BLOCK, block=BLOCK, **params)


@kernel("CumSum", supports=scatters.cumsum_supports)
def cumsum(b):
    geo = scatters.cumsum(b)
    if geo["L"] == 0:
        return
    xi, yo = b.info(0), b.out()
    _launch(
        b,
        "cumsum.cu",
        [b.inputs[0], b.outputs[0]],
        geo["lines"],
        acc=_acc(xi.dtype),
        load=_load(xi, "x[at]"),
        store=_store(yo, "s"),
        in_ctype=xi.ctype,
        out_ctype=yo.ctype,
        **geo,
    )


@kernel("OneHot", supports=scatters.one_hot_supports)
def one_hot(b):
    geo = scatters.one_hot(b)
    ii, vi, yo = b.info(0), b.info(2), b.out()
    same = vi.stype == yo.stype
    _launch(
        b,
        "onehot.cu",
        [b.inputs[0], b.inputs[2], b.outputs[0]],
        geo["total"],
        idx_ctype=ii.ctype,
        idx_load=_load(ii, f"idx[o * {geo['inner']}ull + n]"),
        val_ctype=vi.ctype,
        out_ctype=yo.ctype,
        store="v" if same else _store(yo, _load(vi, "v")),
        **geo,
    )


def _scatter(b, geo: dict) -> None:
    di, ui, yo = b.info(0), b.info(2), b.out()
    acc = _acc(di.dtype)
    float_expr, int_expr = scatters.CUDA_COMBINE[geo["reduction"]]
    _launch(
        b,
        "scatter.cu",
        [b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0]],
        geo["total"],
        acc=acc,
        combine=float_expr if acc == "float" else int_expr,
        data_ctype=di.ctype,
        idx_ctype=b.info(1).ctype,
        upd_ctype=ui.ctype,
        out_ctype=yo.ctype,
        data_load=_load(di, "data[i]"),
        upd_load=_load(ui, "upd[at]"),
        store=_store(yo, "v"),
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
    di, ui, yo = b.info(0), b.info(2), b.out()
    data, idx, upd, y = b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0]
    types = dict(data_ctype=di.ctype, idx_ctype=b.info(1).ctype, upd_ctype=ui.ctype,
                 out_ctype=yo.ctype)  # fmt: skip
    copy = "data[i]" if di.stype == yo.stype else _store(yo, _load(di, "data[i]"))
    _launch(b, "scatter_tuples.cu", [data, y], geo["total"], copy=True, copy_store=copy,
            **types, **geo)  # fmt: skip
    write = "upd[i]" if ui.stype == yo.stype else _store(yo, _load(ui, "upd[i]"))
    _launch(b, "scatter_tuples.cu", [idx, upd, y], geo["scan"] * geo["inner"], copy=False,
            upd_store=write, **types, **geo)  # fmt: skip


def emit_gather_nd(b) -> None:
    """GatherND whose indices are computed at run time (gathers.register)."""
    geo = scatters.gather_nd(b)
    si, yo = b.info(0), b.out()
    _launch(
        b,
        "gather_nd.cu",
        [b.inputs[0], b.inputs[1], b.outputs[0]],
        geo["total"],
        same=si.stype == yo.stype,
        store=store(yo.ctype, load(si.ctype, "src[at]")),
        in_ctype=si.ctype,
        idx_ctype=b.info(1).ctype,
        out_ctype=yo.ctype,
        **geo,
    )
