"""Einsum: a thread per output element sums its products (geometry in backends/einsum.py)."""

from __future__ import annotations

from tinydl.backends import einsum
from tinydl.backends.cuda.kernels import FLOATS, blocks, kernel, load, store

BLOCK = 256


@kernel("Einsum", supports=einsum.supports)
def build(b):
    geo = einsum.geometry(b.attrs["equation"], [b.info(name).shape for name in b.inputs])
    if geo.total == 0:
        return
    infos, yo = [b.info(name) for name in b.inputs], b.out()
    floats = yo.dtype in FLOATS
    b.launch(
        "einsum.cu",
        [*b.inputs, b.outputs[0]],
        blocks(geo.total, BLOCK),
        BLOCK,
        n=len(infos),
        total=geo.total,
        count=geo.count,
        out_dims=geo.out_dims,
        out_strides=geo.out_strides,
        sum_dims=geo.sum_dims,
        sum_strides=geo.sum_strides,
        acc="float" if floats else "long long",
        in_ctype=[i.ctype for i in infos],
        out_ctype=yo.ctype,
        loads=[
            load(i.ctype, f"x{o}[a{o}]") if floats else f"(long long)(x{o}[a{o}])"
            for o, i in enumerate(infos)
        ],
        store=store(yo.ctype, "s") if floats else f"({yo.ctype})(s)",
        block=BLOCK,
    )
