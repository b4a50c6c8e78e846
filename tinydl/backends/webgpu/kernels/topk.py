"""TopK with a constant k: a workgroup per row, a pass over the row per output element
(backends/lowering.py: topk_rows, topk_supports); on llvmpipe, whose shaders' loops are
capped, the passes are spread over as many dispatches as keep each under the cap."""

from __future__ import annotations

import math

from tinydl.backends import lowering
from tinydl.backends.base import Support
from tinydl.backends.webgpu.kernels import ctype, grid, kernel

# Mesa's llvmpipe (lavapipe) ends every loop of a shader, silently, once its loops have run
# 65,535 iterations in all (LP_MAX_TGSI_LOOP_ITERATIONS); a thread of topk.wgsl runs about
# ceil(L / WG) + 2 an output: torchvision's RPN (k = 1,000 of 19,200 anchors) came back wrong
# there as one dispatch.
LOOP_LIMIT = 65535


def _per_output(length: int) -> int:
    """Loop iterations a thread of topk.wgsl runs for one output (and a margin of one)."""
    return math.ceil(length / _group(length)) + 3


def _group(length: int) -> int:
    return 256 if length >= 256 else 64 if length >= 64 else 32


def _supports(node, graph):
    answer = lowering.topk_supports(node, graph)
    if not answer.ok or not _loops_limited():
        return answer
    _, length = lowering.topk_extent(node, graph)
    if length is None:
        return Support(False, "TopK on llvmpipe needs its length known before planning "
                              f"(its loops stop after {LOOP_LIMIT:,} iterations)")  # fmt: skip
    if _per_output(length) >= LOOP_LIMIT:
        return Support(False, f"TopK over {length} on llvmpipe: {_per_output(length):,} loop "
                              f"iterations a thread for one output, past the {LOOP_LIMIT:,} it "
                              "runs")  # fmt: skip
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
    # (outputs a dispatch: all of them, or on llvmpipe as many as its loop cap allows)
    step = max(1, (LOOP_LIMIT - 1) // _per_output(geo.length)) if _loops_limited() else geo.k
    for j0 in range(0, geo.k, step):
        b.dispatch(
            "topk.wgsl",
            [b.inputs[0], b.outputs[0], b.outputs[1]],
            g,
            rows=geo.rows,
            L=geo.length,
            inner=geo.inner,
            K=geo.k,
            J0=j0,
            J1=min(j0 + step, geo.k),
            largest=b.attrs["largest"],
            WG=wg,
            steps=int(math.log2(wg)),
            gx=g[0],
            st=b.info(0).stype,
            ot=b.out(0).stype,
            it=b.out(1).stype,
            acc=ctype(b.info(0).dtype),
        )
