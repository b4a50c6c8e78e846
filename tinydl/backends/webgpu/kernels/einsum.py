"""Einsum: a thread per output element sums its products (geometry in backends/einsum.py)."""

from __future__ import annotations

from tinydl.backends import einsum
from tinydl.backends.webgpu.kernels import ctype, grid, kernel

WG = 256


@kernel("Einsum", supports=einsum.supports)
def build(b):
    geo = einsum.geometry(b.attrs["equation"], [b.info(name).shape for name in b.inputs])
    if geo.total == 0:
        return
    g = grid(geo.total, WG)
    b.dispatch(
        "einsum.wgsl",
        [*b.inputs, b.outputs[0]],
        g,
        n=len(b.inputs),
        total=geo.total,
        count=geo.count,
        out_dims=geo.out_dims,
        out_strides=geo.out_strides,
        sum_dims=geo.sum_dims,
        sum_strides=geo.sum_strides,
        acc=ctype(b.out().dtype),
        in_t=[b.info(name).stype for name in b.inputs],
        out_t=b.out().stype,
        wg=WG,
        gx=g[0],
    )
