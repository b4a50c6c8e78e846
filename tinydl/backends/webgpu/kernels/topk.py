"""TopK with a constant k: a workgroup per row, a pass over the row per output element
(backends/lowering.py: topk_rows, topk_supports)."""

from __future__ import annotations

import math

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import ctype, grid, kernel

# Mesa's llvmpipe (lavapipe) ends every loop of a shader, silently, once its loops have run
# 65,535 iterations in all (LP_MAX_TGSI_LOOP_ITERATIONS); a thread of topk.wgsl runs about
# k x (ceil(L / WG) + 2): torchvision's RPN (k = 1,000 of 19,200 anchors) came back wrong there.
LOOP_LIMIT = 65535


def _group(length: int) -> int:
    return 256 if length >= 256 else 64 if length >= 64 else 32


def _supports(node, graph):
    answer = lowering.topk_supports(node, graph)
    if not answer.ok or not _loops_limited():
        return answer
    k, length = lowering.topk_extent(node, graph)
    k = length if k is None else k
    if length is None:
        return Support(False, "TopK on llvmpipe needs its length and k known before planning "
                              f"(its loops stop after {LOOP_LIMIT:,} iterations)")  # fmt: skip
    loops = int(k) * (math.ceil(length / _group(length)) + 2)
    if loops >= LOOP_LIMIT:
        return Support(False, f"TopK of k = {int(k)} over {length} on llvmpipe: {loops:,} loop "
                              f"iterations a thread, past the {LOOP_LIMIT:,} it runs")  # fmt: skip
    return answer


def _loops_limited() -> bool:
    """Whether the adapter is llvmpipe (Mesa's CPU Vulkan), whose shaders' loops are capped."""
    from tinydl.backends.webgpu.context import get_context

    return "llvmpipe" in get_context().name.lower()


@kernel("TopK", supports=_supports)
def top_k(b):
    geo = lowering.topk_rows(b)
    if geo.rows == 0 or geo.k == 0:
        return
    wg = _group(geo.length)
    g = grid(geo.rows, 1)
    b.dispatch(
        "topk.wgsl",
        [b.inputs[0], b.outputs[0], b.outputs[1]],
        g,
        rows=geo.rows,
        L=geo.length,
        inner=geo.inner,
        K=geo.k,
        largest=b.attrs["largest"],
        WG=wg,
        steps=int(math.log2(wg)),
        gx=g[0],
        st=b.info(0).stype,
        ot=b.out(0).stype,
        it=b.out(1).stype,
        acc=ctype(b.info(0).dtype),
    )
