"""Tile fusion of small-convolution chains (the ESPCN shape) into one tensor-core kernel.

Three convolutions in a row, each stride 1 with "same" zero padding and one group, the first
with few input channels (C0 x K1 x K1 <= 64), the middle ones with multiples of 16 channels, the
last with at most 32 output channels and optionally a DepthToSpace, become one kernel
(chain.cu): a block computes an output tile, holding the halo-extended intermediates in shared
memory, so they never reach device memory, and the three layers' weights stay in shared memory
for all the tiles the block computes. Used at precision="fp16" on GPUs with mma.sync m16n8k16
(compute capability 8.0 and newer); on compute capability 9.0 (Hopper) every layer runs on
warpgroup MMAs instead (wgmma.cuh, compiled for sm_90a; backend option "chain_wgmma"), layer 3
with its column offsets folded into N where it fits ("chain_fold", _fold3). At fp32 the
convolutions run one kernel each.

The tile shape (output rows x columns) and threads per block can be
set with the backend option "chain_tile" = "TH,TW,THREADS[,UNROLL]" ("chain_fusion": False
turns the fusion off); the environment variable TINYDL_CUDA_CHAIN sets either (backends/base.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tinydl.backends.cuda.context import ARCH_SPECIFIC
from tinydl.backends.cuda.kernels import activation_code, kernel, load, store
from tinydl.backends.cuda.kernels.conv import FUSED, geometry
from tinydl.backends.fusion import epilogue, fuse_runs, weights_and_bias
from tinydl.ir.graph import Node
from tinydl.ops.activation import ACTIVATIONS

OP = "tinydl.cuda.ConvChain"
DEFAULT_TILE = (18, 34, 512, 9)  # rows, columns, threads, tap-loop unroll
# On warpgroup MMAs (Hopper): layer 2's 22 x 32 region is 2 segments of 16 pixels a row, 3 rows
# a warp (its A reused across taps from registers; 12 m64 tiles of the flattened region where
# it is read from shared memory), layer 3's 638 flattened rows 10 m64 tiles.
DEFAULT_TILE_WGMMA = (20, 30, 512, 9)
# Accumulator registers per thread a layer may use (m16 tiles x n8 tiles x 4).
ACC_REGS = 64
# Layer 3's accumulators a thread when every warpgroup ran some of layer 3 and then layer 1 with
# them live: beyond this many, ptxas ran out of registers and serialized the wgmmas (a chain
# with 32 outputs in layer 3: 74-76 us on mma.sync, 88 on wgmma, H100), so mma.sync takes such
# chains (still the rule, not measured again since layer 3 moved to warpgroups of its own).
ACC3_REGS = 24
# ... and where layer 3 runs on warpgroups of its own (alongside layer 1 on the others), at
# most this many (ptxas spilled at 48: 18 x 34 and 22 x 30 tiles, six m64 tiles of ESPCN's).
ACC3_ALONE = 40
# Registers per thread layer 2's A rows may take where it reuses them across taps (ESPCN's
# 20 x 30 tile: 5 rows of 4).
A_REGS = 24
# ... and layer 3's (ESPCN's 20 x 30 tile: 7 rows of 4).
A3_REGS = 28


def _act_code(acts) -> list[str] | None:
    out = []
    for kind, params in acts:
        if ACTIVATIONS[kind].slope:
            return None
        out.append("tanh_fast_(r)" if kind == "Tanh" else activation_code(kind, "r", params))
    return out


def _conv_ok(plan, node: Node, last: bool):
    """(Build, geometry, acts) when `node` can be a link of a chain, else None."""
    if node.op not in ("Conv", FUSED) or node.attrs.get("group", 1) != 1:
        return None
    if "d2s" in node.meta and not last:
        return None
    # (a residual Add fused into the conv, and what follows it: chain.cu has no such epilogue;
    # YOLO11's C3k bottleneck, conv -> conv -> conv + shortcut, lost its shortcut)
    if node.meta.get("residual") is not None or node.meta.get("post"):
        return None
    if any(n and plan.const(n) is None for n in node.inputs[1:3]):
        return None
    b = plan.build_class(plan, node)
    w = b.const(1)
    if w is None or w.ndim != 4 or len(b.info(0).shape) != 4:
        return None
    g = geometry(b)
    k = g["KH"]
    if (
        g["KW"] != k
        or k % 2 == 0
        or (g["SH"], g["SW"], g["DH"], g["DW"]) != (1, 1, 1, 1)
        or (g["PT"], g["PL"]) != (k // 2, k // 2)
        or (g["OH"], g["OW"]) != (g["IH"], g["IW"])
    ):
        return None
    acts, slope = epilogue(b, g["OC"])
    code = _act_code(acts)
    if slope is not None or code is None:
        return None
    return b, g, code


def fuse_chains(plan, nodes: list[Node], keep: set[str], types) -> list[Node]:
    """Replace conv -> conv -> conv chains that chain.cu can run with one ConvChain node."""
    enabled = plan.owner.extra.get("chain_fusion", True)
    if plan.precision != "fp16" or not enabled or tuple(plan.ctx.cc) < (8, 0):
        return nodes

    def links(run: list[Node]):
        found = [_conv_ok(plan, n, i == len(run) - 1) for i, n in enumerate(run)]
        return found if all(found) and _shapes_ok([g for _, g, _ in found]) else None

    def chain(run: list[Node], found) -> Node:
        label = "+".join(n.meta.get("label", n.op).replace(FUSED, "Conv") for n in run)
        meta = {"links": found, "label": f"ConvChain({label})"}
        return Node(OP, [run[0].inputs[0]], [run[-1].outputs[0]], {}, name=run[0].name, meta=meta)

    return fuse_runs(nodes, keep, 3, lambda n: n.op in ("Conv", FUSED), links, chain)


def _shapes_ok(gs) -> bool:
    g1, g2, g3 = gs
    return (
        g1["C"] * g1["KH"] ** 2 <= 64
        and g1["OC"] % 16 == 0
        and g2["OC"] % 16 == 0
        and g3["OC"] <= 32
        and g2["C"] == g1["OC"]
        and g3["C"] == g2["OC"]
    )


def _fragments(w: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Weights [Cout][Cin][K][K] as mma.sync B fragments: [K chunk][N tile pair][lane][2][4]
    fp16 (one 16-byte load gives a lane both n8 tiles of a pair), with B[k][n] = w[n][c][dy][dx]
    for k = (dy * K + dx) * Cin + c. N is padded to a multiple of 16 with zeros."""
    cout, cin, kh, kw = w.shape
    b = w.transpose(2, 3, 1, 0).reshape(kh * kw * cin, cout)  # [k][n]
    nk, nt = math.ceil(b.shape[0] / 16), 2 * math.ceil(cout / 16)
    full = np.zeros((nk * 16, nt * 8))
    full[: b.shape[0], :cout] = b
    lane = np.arange(32)
    gq, tq = lane // 4, lane % 4
    frag = np.zeros((nk, nt, 32, 4))
    for kc in range(nk):
        for n in range(nt):
            cols = n * 8 + gq
            for j, dk in enumerate((0, 1, 8, 9)):
                frag[kc, n, :, j] = full[kc * 16 + 2 * tq + dk, cols]
    pairs = frag.reshape(nk, nt // 2, 2, 32, 4).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(pairs).astype(np.float16), nk, nt


def _wgmma_b(w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Weights [Cout][Cin][K][K] as wgmma's B in shared memory (wgmma.cuh): per K chunk of 16,
    per n8 block of output channels, two 8x8 core matrices (k 0-7, 8-15) of 8 rows (n) of 8
    contiguous k, fp16; B[k][n] = w[n][c][dy][dx] for k = (dy * K + dx) * Cin + c, N padded to
    a multiple of 16 with zeros. `bias`: put in row K * K * Cin, the first past the taps (its
    K chunk must have room: the kernel's A is 1 there)."""
    cout, cin, kh, kw = w.shape
    b = w.transpose(2, 3, 1, 0).reshape(kh * kw * cin, cout)
    nk, n = math.ceil(b.shape[0] / 16), 16 * math.ceil(cout / 16)
    full = np.zeros((nk * 16, n))
    full[: b.shape[0], :cout] = b
    if bias is not None:
        assert b.shape[0] < nk * 16, "no room for the bias in the last K chunk"
        full[b.shape[0], :cout] = bias
    return _core_matrices(full)


def _core_matrices(full: np.ndarray) -> np.ndarray:
    """B[k][n] (k a multiple of 16, n of 8) as wgmma's core matrices (_wgmma_b's layout)."""
    nk, n = full.shape[0] // 16, full.shape[1]
    blocks = full.reshape(nk, 2, 8, n // 8, 8)  # [chunk][k half][k][n block][n]
    return np.ascontiguousarray(blocks.transpose(0, 3, 1, 4, 2)).astype(np.float16)


def _fold_shape(k: int, cout: int) -> tuple[int, int, int]:
    """(A, R, N) of a folded layer 3 (_fold_b): A whole blocks of 8 output channels, R channels
    past them, N columns (K column offsets of each)."""
    a, r = divmod(cout, 8)
    return a, r, 8 * (k * a + math.ceil(k * r / 8))


def _fold_col(dx: int, c: int, k: int, a: int, r: int) -> int:
    """B's column of output channel c at column offset dx in a folded layer 3: channel block j
    of offset dx is n8 block dx * A + j (so a lane holds the same channels of every offset);
    the R channels past them, offset-major, after all of those."""
    if c < 8 * a:
        return 8 * (dx * a + c // 8) + c % 8
    return 8 * k * a + dx * r + c - 8 * a


def _fold_b(w: np.ndarray) -> np.ndarray:
    """Layer 3's weights [Cout][Cin][K][K] with its column offsets folded into N (chain.cu's
    layer3_fold): K = dy x Cin (k = dy * Cin + c, chunks of 16), column _fold_col(dx, o) holds
    w[o][c][dy][dx]; as wgmma's core matrices."""
    cout, cin, k, _ = w.shape
    a, r, n = _fold_shape(k, cout)
    full = np.zeros((k * cin, n))
    for dx in range(k):
        for o in range(cout):
            full[:, _fold_col(dx, o, k, a, r)] = w[o, :, :, dx].T.reshape(-1)
    return _core_matrices(full)


def _layout(th, tw, threads, ks, cs, wgmma: bool) -> dict | None:
    """Regions, shared-memory sizes (without the weights) and MMA tiling of a th x tw output
    tile; None where warpgroup MMAs cannot take it (their accumulators would not fit)."""
    (k1, k2, k3), (c0, c1, c2, n3) = ks, cs
    r2 = k3 // 2
    r1 = r2 + k2 // 2
    r0 = r1 + k1 // 2
    hi, wi = th + 2 * r0, tw + 2 * r0
    h1, w1 = th + 2 * r1, tw + 2 * r1
    h2, w2 = th + 2 * r2, tw + 2 * r2
    s1, s2 = c1 + 8, c2 + 8
    m1, m2, m3 = h1 * w1, h2 * w2, th * tw
    warps = threads // 32
    nts = (c1 // 8, c2 // 8, n3 // 8)
    if wgmma:
        # Layers 2 and 3 run their M rows over the previous region at its full width
        # (wgmma.cuh), in m64 tiles; the planes hold every pixel their last tile's taps read.
        # Each warpgroup takes its tiles of a layer in one pass where its accumulators fit.
        m2, m3 = (h2 - 1) * w1 + w2, (th - 1) * w2 + tw
        mts = [math.ceil(m1 / 64), math.ceil(m2 / 64), math.ceil(m3 / 64)]
        groups = warps // 4
        # (layer 2 may take more passes where its accumulators would not fit one; layer 3's
        # stay in registers under layer 1, so it takes one)
        mb2 = min(math.ceil(mts[1] / groups), ACC_REGS // (4 * nts[1]))
        mbs = [1, max(1, mb2), math.ceil(mts[2] / groups)]
        if any(mb * nt * 4 > ACC_REGS for mb, nt in zip(mbs, nts, strict=True)):
            return None
        if mbs[2] * nts[2] * 4 > ACC3_REGS:
            return None
        # Layer 3 runs on the fewest warpgroups its accumulators fit (two at least, where there
        # are), while the others start layer 1 of the next tile (chain.cu).
        l3g = min(groups, max(min(2, groups), math.ceil(mts[2] / (ACC3_ALONE // (4 * nts[2])))))
        mbs[2] = math.ceil(mts[2] / l3g)
        l1_split = _split1(mts[0], _l3_load(mts[2], mbs[2], l3g, groups, k3 * k3 * c2 // 16))
        # (the first tile's layer 1 and the last one's layer 3, each alone in its phase, on
        # every warpgroup, evenly)
        l1_even = _even(mts[0], groups)
        l3_split = [min(w * mbs[2], mts[2]) for w in range(l3g + 1)] + [mts[2]] * (groups - l3g)
        l3_calls, l3_last = _calls(l3_split), _calls(_even(mts[2], groups))
        # (layer 1 stores whole m64 tiles, zeros past its region)
        p1 = max(mts[0] * 64, mts[1] * 64 + (k2 - 1) * (w1 + 1))
        # (layer 3 reading rows from registers, REUSE3, reads up to K3 - 1 pixels past the region)
        p2 = max(h2 * w2 + k3 - 1, mts[2] * 64 + (k3 - 1) * (w2 + 1))
        l1_bytes, l2_bytes = c1 * p1 * 2, c2 * p2 * 2
    else:
        mts = [math.ceil(m / 16) for m in (m1, m2, m3)]
        # m16 tiles a warp computes at once per layer: enough for one pass over the region,
        # as registers allow (B fragments are then read once per MB tiles).
        mbs = [
            max(1, min(ACC_REGS // (4 * nt), math.ceil(mt / warps)))
            for mt, nt in zip(mts, nts, strict=True)
        ]
        p1 = p2 = 0
        l1_bytes, l2_bytes = h1 * w1 * s1 * 2, h2 * w2 * s2 * 2
        l3g, l1_split, l1_even, l3_calls, l3_last = 0, [], [], [], []
    in_bytes = hi * wi * c0 * 2
    return dict(
        WGMMA=wgmma, L3G=l3g, L1_SPLIT=l1_split, L1_EVEN=l1_even,
        L3_CALLS=l3_calls, L3_LAST_CALLS=l3_last,
        R0=r0, R1=r1, R2=r2, HI=hi, WI=wi, H1=h1, W1=w1, H2=h2, W2=w2,
        S1=s1, S2=s2, P1=p1, P2=p2, M1=m1, M2=m2, M3=m3,
        MT1=mts[0], MT2=mts[1], MT3=mts[2], MB1=mbs[0], MB2=mbs[1], MB3=mbs[2],
        in_bytes=in_bytes, l1_bytes=l1_bytes, l2_bytes=l2_bytes,
        smem=_pad16(in_bytes) + _pad16(l1_bytes) + _pad16(l2_bytes),
    )  # fmt: skip


# Costs in one warpgroup's cycles that balance layer 1 against layer 3 (chain.cu; clock64 at
# each phase of the ESPCN x3 kernel on an H100): a layer-1 m64 tile (gather, MMA, epilogue),
# a layer-3 wgmma (its warpgroups wait at issue until the tensor cores take them, all of the
# layer's wgmmas sharing them), a layer-3 m64 tile stored.
L1_TILE_CYCLES, L3_WGMMA_CYCLES, L3_STORE_CYCLES = 1300, 20, 550


def _l3_load(mt3, mb3, l3g, groups, nk3) -> list[int]:
    """Layer 3's modelled cycles on each warpgroup in the phase it shares with layer 1: its
    mt3 m64 tiles on warpgroups 0 to l3g - 1 (mb3 each), nk3 K chunks a tile."""
    return [
        mt3 * nk3 * L3_WGMMA_CYCLES + max(0, min(mb3, mt3 - w * mb3)) * L3_STORE_CYCLES
        if w < l3g
        else 0
        for w in range(groups)
    ]


def _split1(mt1, load: list[int]) -> list[int]:
    """Where each warpgroup's share of layer 1's mt1 m64 tiles begins (one per warpgroup, then
    mt1), given each warpgroup's other work in the phase (`load`, cycles): the tiles go one at a
    time to the warpgroup with the least work so far (the later ones first on a tie)."""
    load, groups = list(load), len(load)
    count = [0] * groups
    for _ in range(mt1):
        w = min(range(groups), key=lambda i: (load[i], -i))
        count[w] += 1
        load[w] += L1_TILE_CYCLES
    return [sum(count[:w]) for w in range(groups + 1)]


def _even(tiles: int, groups: int) -> list[int]:
    """Where each warpgroup's share of `tiles` m64 tiles begins (then `tiles`): even."""
    return [w * tiles // groups for w in range(groups + 1)]


def _calls(split: list[int]) -> list[tuple[int, list[tuple[int, int]]]]:
    """A split of tiles over warpgroups (as _even's) as chain.cu's layer-3 calls: for each count
    of tiles a warpgroup takes (none: no call), the warpgroups taking that many and their first."""
    counts = [hi - lo for lo, hi in itertools.pairwise(split)]
    return [
        (c, [(w, split[w]) for w in range(len(counts)) if counts[w] == c])
        for c in sorted(set(counts) - {0})
    ]


def _rows(total: int, used: int, groups: int, blocks: int) -> list[int]:
    """Where each warpgroup's share of `total` rows begins (then the rows they cover, as _even's)
    where a warpgroup's warps take `blocks` row blocks: the first `used` warpgroups R rows a warp
    (R as few as cover them) or, after the first that need R, one fewer; the others none."""
    per = math.ceil(total / (used * blocks))
    full = math.ceil((total - used * blocks * (per - 1)) / blocks)
    out = [0]
    for w in range(groups):
        out.append(out[-1] + (blocks * (per if w < full else per - 1) if w < used else 0))
    return out


def _patch(width: int, heights=(2, 1)) -> tuple[int, int] | None:
    """How a warp's 16 M rows cover a region `width` pixels wide where a layer reuses its A rows
    across taps (chain.cu's reuse_mmas): (PH, SEG), PH rows of 16 / PH pixels (the first of
    `heights` the width allows), SEG such segments a row, a divisor of 4 (the warps of a
    warpgroup); None where none fits."""
    for ph in heights:
        seg, rest = divmod(width, 16 // ph)
        if rest == 0 and seg in (1, 2, 4):
            return ph, seg
    return None


def _a_regs(ph: int, rows: int, k: int) -> int:
    """Registers a lane's A rows take in reuse_mmas: `rows` M tiles of PH rows each, reading
    PH rows + k - 1 rows of the previous layer (4 registers for 16 pixels of 16 channels)."""
    return 4 * (ph * rows + k - 1) // ph


def _reuse2(lay: dict, threads: int, c2: int, k2: int, enabled: bool) -> dict:
    """Whether layer 2 on warpgroups reuses its A rows across taps from registers (chain.cu,
    REUSE2): its region's width as _patch takes it, the rows split evenly enough over the
    warps, their accumulators within ACC_REGS and the rows they read within A_REGS. PH2, SEG2:
    _patch's (two rows of 8 pixels where the width allows: a fifth fewer A loads at three M
    tiles a warp); R2ROWS: M tiles a warp (of PH2 rows each)."""
    warps = threads // 32
    patch = _patch(lay["W2"])
    if not (enabled and lay["WGMMA"] and patch):
        return {"REUSE2": False, "PH2": 1, "SEG2": 0, "R2ROWS": 0, "L2_CALLS": []}
    ph, seg = patch
    rows = math.ceil(lay["H2"] / (ph * (warps // seg)))
    fits = rows * c2 // 2 <= ACC_REGS and _a_regs(ph, rows, k2) <= A_REGS
    split = _rows(lay["H2"], warps // 4, warps // 4, ph * (4 // seg))
    return {"REUSE2": fits, "PH2": ph, "SEG2": seg, "R2ROWS": rows, "L2_CALLS": _calls(split)}


def _reuse3(lay: dict, th: int, threads: int, k3: int, nt3: int, enabled: bool) -> dict:
    """Whether layer 3 on warpgroups reuses its A rows across taps from registers (chain.cu,
    REUSE3): layer 2's region width as _patch takes it (PH3, SEG3), and the M tiles a warp
    takes (over L3G warpgroups) within ACC3_ALONE accumulators and A3_REGS of A rows.
    L3_CALLS, L3_LAST_CALLS: the rows each warpgroup takes (as _calls) in the phase shared with
    layer 1 and in the last tile's, on every warpgroup."""
    groups = threads // 128
    # (rows of 16 pixels: with pieces of two rows, ESPCN's layer 3 spilled 56 bytes and ran no
    # faster, docs/cuda.md)
    patch = _patch(lay["W2"], (1,))
    if not (enabled and lay["WGMMA"] and patch):
        return {"REUSE3": False, "PH3": 1, "SEG3": 0}
    ph, seg = patch
    blocks = ph * (4 // seg)
    rows = math.ceil(th / (lay["L3G"] * blocks))
    if rows * nt3 * 4 > ACC3_ALONE or _a_regs(ph, rows, k3) > A3_REGS:
        return {"REUSE3": False, "PH3": 1, "SEG3": 0}
    return {
        "REUSE3": True,
        "PH3": ph,
        "SEG3": seg,
        "L3_CALLS": _calls(_rows(th, lay["L3G"], groups, blocks)),
        "L3_LAST_CALLS": _calls(_rows(th, groups, groups, blocks)),
    }


# A folded layer 3's modelled cycles a batch (four rows, one a warp) on one warpgroup beside
# layer 1 on the others (clock64 at each phase of the ESPCN x3 kernel on an H200: 5 batches in
# 7,000-7,400 cycles; on two warpgroups at once, 1,900-2,100 a batch on each).
L3_FOLD_CYCLES = 1400


def _fold3(lay: dict, th: int, threads: int, k3: int, c3: int, enabled: bool) -> dict:
    """Whether layer 3 on warpgroups runs folded (chain.cu's layer3_fold, FOLD3): its column
    offsets in N, so that a warp's M rows are a whole row of layer 2's region (SEGF segments of
    16 pixels) and a row takes K3 x channels / 16 K chunks a segment at N = NF3 (_fold_shape)
    instead of K3 x K3 x channels / 16 at N = the output channels; the offsets' partial sums
    meet across lanes. Where the region is whole segments wide, the kernel at most 9 wide (an
    offset reaches the next group of 8 pixels at most), and a row's accumulators (SEGF x NF3 /
    2) and A (SEGF x K3 x 4) fit ACC3_ALONE and A3_REGS. Beside layer 1 it runs on one
    warpgroup (on two, each was slower a row than one alone: L3_FOLD_CYCLES), the last tile's
    on every warpgroup. L3_CALLS, L3_LAST_CALLS: the rows each warpgroup takes (four at a time,
    one a warp; as _calls); L3_FOLD_LOAD: its modelled cycles in the phase shared with layer
    1."""
    seg, rest = divmod(lay["W2"], 16)
    a, r, n = _fold_shape(k3, c3)
    groups = threads // 128
    if not (enabled and lay["WGMMA"] and 1 < k3 <= 9 and rest == 0 and seg):
        return {"FOLD3": False}
    if seg * n // 2 > ACC3_ALONE or seg * k3 * 4 > A3_REGS:
        return {"FOLD3": False}
    rows = _rows(th, 1, groups, 4)
    return {
        "FOLD3": True,
        "REUSE3": False,
        "L3G": 1,
        "SEGF": seg,
        "NF3": n,
        "FA3": a,
        "FR3": r,
        # (B's column of each output channel at each column offset)
        "FOLD_COLS": [[_fold_col(dx, o, k3, a, r) for dx in range(k3)] for o in range(c3)],
        "L3_CALLS": _calls(rows),
        "L3_LAST_CALLS": _calls(_rows(th, groups, groups, 4)),
        "L3_FOLD_LOAD": [(hi - lo) // 4 * L3_FOLD_CYCLES for lo, hi in itertools.pairwise(rows)],
    }


def _given_split(value: str, th: int, mt1: int, groups: int) -> tuple[list[int], list[int]]:
    """The backend option "chain_split" = "ROWS/TILES" (each a count per warpgroup, comma
    separated): layer 3's rows (multiples of 4, th in all) and layer 1's m64 tiles (mt1 in all)
    each warpgroup takes in the phase they share, as starts (_even's form)."""
    try:
        rows, tiles = ([int(v) for v in part.split(",")] for part in str(value).split("/"))
    except ValueError:
        rows = tiles = []
    if (
        len(rows) != groups
        or len(tiles) != groups
        or any(v < 0 or v % 4 for v in rows)
        or sum(rows) < th
        or min(tiles) < 0
        or sum(tiles) != mt1
    ):
        raise ValueError(
            f"chain_split: expected {groups} layer-3 row counts (multiples of 4, {th} or more "
            f"in all), '/', then {groups} layer-1 tile counts ({mt1} in all), got {value!r}"
        )
    return [sum(rows[:w]) for w in range(groups + 1)], [sum(tiles[:w]) for w in range(groups + 1)]


def _b_bytes(shape) -> int:
    """Bytes of a layer's B operand (_fragments or _wgmma_b) for weights of `shape`: K chunks of
    16 x N padded to 16, fp16."""
    cout, cin, kh, kw = shape
    return math.ceil(cin * kh * kw / 16) * 16 * 16 * math.ceil(cout / 16) * 2


def _pad16(n: int) -> int:
    return (n + 15) // 16 * 16


@kernel(OP)
def conv_chain(b):
    (b1, g1, act1), (b2, g2, act2), (b3, g3, act3) = b.node.meta["links"]
    xi, yo = b.info(0), b.out()
    n, c0, h, w = xi.shape
    k1, k2, k3 = g1["KH"], g2["KH"], g3["KH"]
    c1, c2, c3 = g1["OC"], g2["OC"], g3["OC"]
    d2s = b3.node.meta.get("d2s")
    bs, dcr = (d2s[0], d2s[1] == "DCR") if d2s else (1, False)
    nt3 = 2 * math.ceil(c3 / 16)
    # Hopper: every layer on warpgroup MMAs (sm_90a), unless the option says no.
    wgmma = tuple(b.ctx.cc) == (9, 0) and bool(b.option("chain_wgmma", True))
    override = b.option("chain_tile")
    given = [int(v) for v in str(override).split(",")] if override else []
    default = DEFAULT_TILE_WGMMA if wgmma else DEFAULT_TILE
    th, tw, threads, unroll = (given + list(default)[len(given) :])[:4]
    wgmma = wgmma and threads % 128 == 0  # (whole warpgroups)
    ks, cs = (k1, k2, k3), (c0, c1, c2, nt3 * 8)

    links = [(key, *weights_and_bias(link, 0)) for key, link in (("1", b1), ("2", b2), ("3", b3))]
    # Each layer's B (mma.sync fragments or wgmma's core matrices: the same size) and bias.
    wbytes = sum(_pad16(_b_bytes(wts.shape)) for _, wts, _ in links)
    wbytes += sum(_pad16(4 * count) for count in (c1, c2, nt3 * 8))
    while True:
        lay = (wgmma and _layout(th, tw, threads, ks, cs, True)) or _layout(
            th, tw, threads, ks, cs, False
        )
        wgmma = lay["WGMMA"]
        if wbytes + lay["smem"] <= b.ctx.smem_optin or th <= 4:
            break
        th //= 2
    # On warpgroups, layer 1's bias comes through its last K chunk where the taps leave room.
    kt1 = c0 * k1 * k1
    bias1k = wgmma and kt1 % 16 != 0
    reuse2 = _reuse2(lay, threads, c2, k2, bool(b.option("chain_reuse", True)))
    # Layer 3 folded where it fits, else reusing its rows where layer 2 does (with layer 2 on
    # shared-memory A, the registers did not hold both, tanh_sigmoid_x2_dcr of the tests
    # spilling).
    fold = _fold3(lay, th, threads, k3, c3, bool(b.option("chain_fold", True)))
    l3 = fold
    if not fold["FOLD3"]:
        l3 = {"FOLD3": False, **_reuse3(lay, th, threads, k3, nt3, reuse2["REUSE2"])}
    split = b.option("chain_split") if wgmma else None  # (mma.sync: no such phases)
    if split and not fold["FOLD3"]:
        raise ValueError("chain_split: the chain's layer 3 is not folded (chain_fold)")
    if fold["FOLD3"]:
        starts = _split1(lay["MT1"], fold["L3_FOLD_LOAD"])
        if split:
            rows, starts = _given_split(split, th, lay["MT1"], threads // 128)
            l3["L3_CALLS"] = _calls(rows)
        l3["L1_SPLIT"] = starts
    raws, nk = {}, {}
    for key, wts, bias in links:
        nk[key] = math.ceil(wts.shape[1] * wts.shape[2] ** 2 / 16)
        if key == "3" and fold["FOLD3"]:
            raw = _fold_b(wts).tobytes()
        elif wgmma:
            raw = _wgmma_b(wts, bias if key == "1" and bias1k else None).tobytes()
        else:
            raw = _fragments(wts)[0].tobytes()
        raws[f"OFF_B{key}"] = raw
    for (key, _, bias), count in zip(links, (c1, c2, nt3 * 8), strict=True):
        vec = np.zeros(count, np.float32)
        vec[: bias.size] = bias
        raws[f"OFF_BIAS{key}"] = vec.tobytes()
    # Layer 1's weights and bias first: the kernel loads them before the first tile, the rest
    # (from OFF_B2 on) while that tile's layer 1 runs.
    parts, offs, pos = [], {}, 0
    for name in ("OFF_B1", "OFF_BIAS1", "OFF_B2", "OFF_B3", "OFF_BIAS2", "OFF_BIAS3"):
        offs[name] = pos
        parts.append(raws[name] + bytes(_pad16(len(raws[name])) - len(raws[name])))
        pos += _pad16(len(raws[name]))
    # (a folded layer 3's B is smaller than wbytes counts: zeros up to it)
    pack = np.frombuffer(b"".join(parts).ljust(wbytes, b"\0"), np.uint8)
    off_in = wbytes
    off_l1 = off_in + _pad16(lay["in_bytes"])
    off_l2 = off_l1 + _pad16(lay["l1_bytes"])
    smem = off_l2 + _pad16(lay["l2_bytes"])
    ty, tx = math.ceil(h / th), math.ceil(w / tw)
    tiles = n * ty * tx
    hi, wi = lay["HI"], lay["WI"]
    b.launch(
        "chain.cu",
        [b.inputs[0], b.upload("weights", pack), b.outputs[0]],
        min(tiles, b.ctx.sm_count),
        threads,
        smem=smem,
        N=n, C0=c0, H=h, W=w, K1=k1, K2=k2, K3=k3, C1=c1, C2=c2, C3=c3,
        KT1=kt1, NK1=nk["1"], BIAS1K=bias1k, BIAS1K_R=2 * (kt1 % 16 >= 8),
        BIAS1K_T2=kt1 % 16 - kt1 % 2 - 8 * (kt1 % 16 >= 8), NT1=c1 // 8, NT2=c2 // 8, NT3=nt3,
        TH=th, TW=tw, TY=ty, TX=tx, TILES=tiles, THREADS=threads,
        TAP_UNROLL=unroll, ARCH_SPECIFIC=ARCH_SPECIFIC,
        wgmma_ns=sorted({c1, c2, nt3 * 8, l3.get("NF3", c1)}),
        **reuse2,
        NPRE=math.ceil(hi * wi * c0 / threads),
        **{**{k: v for k, v in lay.items() if k.isupper()}, **l3},
        WBYTES=wbytes, OFF_IN=off_in, OFF_L1=off_l1, OFF_L2=off_l2,
        **offs,
        BS=bs, dcr=dcr, OCF=c3 // (bs * bs),
        epilogues=[
            ("epilogue1", act1, act1 == ["tanh_fast_(r)"]),
            ("epilogue2", act2, act2 == ["tanh_fast_(r)"]),
        ],
        act3=act3,
        xt=xi.ctype, yt=yo.ctype,
        xload=load(xi.ctype, f"xi[((size_t)c * {h} + gy) * {w} + gx]"),
        ystore=store(yo.ctype, "r"),
    )  # fmt: skip
