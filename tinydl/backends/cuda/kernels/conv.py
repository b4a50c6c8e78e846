"""Conv, ConvTranspose and tinydl.FusedConv, with fused epilogues.

- conv.cu: direct convolution (any group count, strides, dilations, pads; 1-D as 2-D with one
  row). Each thread makes one output pixel x a block of output channels in fp32; the epilogue
  adds the bias (BatchNormalization folded in), the activations in order, and stores through a
  fused DepthToSpace when there is one.
- conv_tc.cu: at fp16 storage on sm_80 and newer, an ungrouped convolution is an implicit GEMM
  on tensor cores instead (M = output pixels, N = output channels, K = taps x channels; fp16
  operands, the weights rounded to fp16 as PyTorch's .half() does, or with option
  "conv_exact_weights" kept as hi + lo fp16 parts; fp32 accumulation, the same epilogue); over
  float32 storage the same GEMM on tf32 tensor cores: at precision "tf32" with operands
  rounded to tf32's 10-bit mantissa (as PyTorch's default for cuDNN convolutions), otherwise
  as 3xTF32 (each operand split into two tf32 parts, three MMAs: float32's accuracy). Option
  "conv_tensor_cores" (default True).
- conv_transpose.cu: the transposed convolution as a gather over the taps that land on each
  output pixel.
Chains of small convolutions (ESPCN) are fused further into one kernel: see chain.py.
"""

from __future__ import annotations

import math

import numpy as np

from tinydl.backends.base import to_half
from tinydl.backends.cuda.kernels import activation_code, blocks, kernel, load, store
from tinydl.backends.cuda.kernels.elementwise import Operand, emit
from tinydl.backends.fusion import (
    as_2d,
    conv_label,
    conv_supports_3d,
    conv_transpose_geometry,
    conv_transpose_window,
    conv_window,
    epilogue,
    epilogue_code,
    weights_and_bias,
)
from tinydl.ops.activation import ACTIVATIONS, check_covers
from tinydl.ops.conv import (
    _kernel,
    window_attrs,
    window_geometry,
)
from tinydl.ops.fused import FUSED_CONV as FUSED

BLOCK = 128


def geometry(b):
    """The 2-D window of a Conv node: its constants by the templates' names, and 1-D -> 2-D."""
    xi = b.info(0)
    w = b.const(1)
    kernel_shape = _kernel(b.attrs, w.shape)
    strides, dilations, pads = window_attrs(b.attrs, kernel_shape)
    geo = window_geometry(xi.shape[2:], kernel_shape, strides, dilations, pads, b.attrs["auto_pad"])
    if len(kernel_shape) == 1:
        kernel_shape, strides, dilations = [1, *kernel_shape], [1, *strides], [1, *dilations]
        geo = [(0, 0, 1), *geo]
    n, c, ih, iw = as_2d(xi.shape)
    oc, oh, ow = w.shape[0], geo[0][2], geo[1][2]
    return dict(
        N=n, C=c, IH=ih, IW=iw, OC=oc, OH=oh, OW=ow,
        KH=kernel_shape[0], KW=kernel_shape[1], SH=strides[0], SW=strides[1],
        DH=dilations[0], DW=dilations[1], PT=geo[0][0], PL=geo[1][0],
    )  # fmt: skip


def _work_split(g, group: int, mg: int, sms: int) -> tuple[int, int]:
    """(pixels, output channels) per thread: 4 x 8 when the layer has work enough to fill the
    GPU that way (about 1024 threads per SM), fewer when it is small, so that a 1x1 conv over
    an 8x8 map with 480 channels still spreads over the SMs instead of 24 busy blocks."""
    want = sms * 1024
    px, ocb = (4 if g["OW"] >= 16 else 1), _block(mg)
    while True:
        threads = g["N"] * group * math.ceil(mg / ocb) * g["OH"] * math.ceil(g["OW"] / px)
        if threads >= want or (px == 1 and ocb == 1):
            return px, ocb
        if px > 1:
            px //= 2
        else:
            ocb = max(1, ocb // 2)


def _block(mg: int) -> int:
    """Output channels per thread: 8 when the group has that many, else what it has."""
    return 8 if mg >= 8 else mg


def _tensor_cores(b, g: dict, group: int) -> bool:
    """Whether conv_tc.cu takes the node: one group, or groups it can take (`_grouped_tile`);
    no fused DepthToSpace, a device with mma.sync on fp16 and tf32 (sm_80+), and the option
    left on."""
    return (
        b.info(0).ctype in ("half_t", "float")
        and (group == 1 or _grouped_tile(g, group) is not None)
        and b.node.meta.get("d2s") is None
        and tuple(b.ctx.cc) >= (8, 0)
        and bool(b.option("conv_tensor_cores", True))
        and g["C"] // group * g["KH"] * g["KW"] >= 16
    )


TC_GROUP_WASTE = 8  # a grouped convolution's tile may multiply this many times its work


def _grouped_tile(g: dict, group: int) -> int | None:
    """The output channels of a tile (BN) for a grouped convolution on tensor cores, or None:
    a tile of whole groups reads their input channels as a dense K, zero where a channel is
    another group's, so it multiplies BN / (channels per group) times the work; taken while
    that is at most TC_GROUP_WASTE, the tiles cover the channels evenly, and a group reads as
    many channels as it makes (ResNeXt's, RegNet's; not depthwise)."""
    mg, cg = g["OC"] // group, g["C"] // group
    bn = _tile_shape(g["OC"])[1]
    if mg != cg or bn % mg or g["OC"] % bn or bn // mg > TC_GROUP_WASTE:
        return None
    return bn


def _mode(b) -> str:
    """How conv_tc.cu multiplies: "fp16" (fp16 input, or a float32 one at fp16 precision: a
    graph's input, made fp16 first), "tf32" (float32 input at precision tf32) or "3xtf32"
    (float32 input otherwise)."""
    if b.info(0).ctype == "half_t" or _fp32_input(b):
        return "fp16"
    return "tf32" if b.plan.precision == "tf32" else "3xtf32"


def to_tf32(a: np.ndarray) -> np.ndarray:
    """float32 rounded to tf32 (10 mantissa bits), to nearest with ties away from zero, as
    PTX's cvt.rna.tf32.f32 rounds the input patch in the kernel."""
    a = np.ascontiguousarray(a, np.float32)
    u = a.view(np.uint32) + np.uint32(0x1000)
    np.bitwise_and(u, np.uint32(0xFFFFE000), out=u)  # (in place: weights are large)
    r = u.view(np.float32)
    if not np.isfinite(r).all():  # no rounding up into inf (nor touching inf or NaN)
        r = np.where(np.isfinite(a), np.where(np.isfinite(r), r, a), a)
    return r


def _exact_weights(b) -> bool:
    """Backend option "conv_exact_weights": fp16 convolutions keep float32 weights exactly."""
    return bool(b.option("conv_exact_weights", False))


def _fp32_input(b) -> bool:
    """The convolution reads the partition's float32 input at fp16 precision (a stem)."""
    return (
        b.plan.precision == "fp16"
        and b.info(0).ctype == "float"
        and b.inputs[0] in b.plan.input_names
    )


# (BM, BN, WM, WN): output pixels x channels per block of 4 warps, per warp.
TC_TILES = {"wide": (64, 64, 32, 32), "narrow": (128, 32, 32, 32)}
TC_THREADS, TC_BK = 128, 32
TC_FILL = 2  # K is split while the blocks stay within this many per SM
# conv_tc.cu's GEMM compiles in about 8 small kernels' time (NVRTC, 0.25-0.75 s on an x86 core).
TC_COMPILE_WEIGHT = 8


def _tile_shape(oc: int) -> tuple[int, int, int, int]:
    return TC_TILES["wide" if oc > 32 else "narrow"]


def tc_tile(
    m: int, oc: int, parts: int, mode: str, ct: int, step: int | None = None
) -> tuple[int, int, int, int, int, int]:
    """(BM, BN, WM, WN, threads, BK) of conv_tc.cu for a convolution of M output pixels, with
    `parts` weight parts, whose tile reads `ct` input channels. fp16 with one part walks K 64 at
    a time (ResNet-18 at batch 8 on an H100: 0.556 -> 0.417 ms against 32; with two fp16 parts
    64 gained 0-5 %, at tf32 -7 to +3 % on ResNet-18/50) where a thread's share of a step is
    channels of one tap (`ct` a multiple of it), else by 32 (HRNet-W18-small's 18 and 36
    channels, RegNetY's 48 and 104, the stems': HRNet at batch 8 on an H100 1.395 -> 1.070 ms;
    docs/cuda.md). `step` (backend option conv_k_step, 32 or 64) sets it for fp16 with one
    part."""
    bm, bn, wm, wn = _tile_shape(oc)
    bk = TC_BK
    if mode == "fp16" and parts == 1:
        if step is not None:
            bk = step
        elif ct % (bm * 64 // TC_THREADS) == 0:
            bk = 64
    return bm, bn, wm, wn, TC_THREADS, bk


def _k_step(b) -> int | None:
    """The backend option conv_k_step: None (by the channels), 32 or 64."""
    step = b.option("conv_k_step")
    if step is not None and step not in (32, 64):
        raise ValueError(f"backend option conv_k_step: expected 32 or 64, got {step!r}")
    return step


def conv_epilogue(b, g: dict, bias: np.ndarray) -> tuple[str, list[str], dict]:
    """What conv.cu and conv_tc.cu's epilogues take: the uploaded per-channel table (bias,
    then PRelu slopes), the residual's value name (if one is fused) and the template params."""
    oc = g["OC"]
    acts, slope = epilogue(b, oc)
    chan = [bias] if slope is None else [bias, np.asarray(slope, np.float64)]
    residual = b.node.meta.get("residual")
    res_index = f"(((size_t)n * {oc} + oc) * {g['OH']} + oy) * {g['OW']} + ox"
    params = dict(
        yt=b.out().ctype,
        ystore=store(b.out().ctype, "r"),
        residual=residual is not None,
        rt=b.info(residual).ctype if residual else "float",
        rload=load(b.info(residual).ctype, f"res[{res_index}]") if residual else "",
        post=epilogue_code(b.node.meta.get("post", []), activation_code),
        has_slope=slope is not None,
        epilogue=epilogue_code(acts, activation_code),
    )
    channels = b.upload("channels", np.concatenate(chan), "float32")
    params["steps"] = acts, b.node.meta.get("post", []), slope is not None, residual is not None
    return channels, [residual] if residual is not None else [], params


def magic(d: int) -> tuple[int, int]:
    """(mul, shr) with n // d == (umulhi(n, mul) + n) >> shr for 0 <= n < 2**31: conv_tc.cu's
    fast_div: a division by a runtime value in three integer instructions."""
    if not 1 <= d < 2**31:
        raise ValueError(f"divisor {d} is outside 1 .. 2**31 - 1")
    shr = (d - 1).bit_length()
    return (1 << 32) * ((1 << shr) - d) // d + 1, shr


# conv_tc.cu's `Geo` argument: the channel counts of a layer whose kernel is shared.
GEO = np.dtype(
    [(f, np.int32) for f in ("C", "CT", "K", "KP", "KS")]
    + [("ct_mul", np.uint32), ("ct_shr", np.uint32)],
    align=True,
)
# Layers of a plan that differ only in their input channels (DenseNet's growing inputs: 6 to
# 24 of them a class) share one conv_tc.cu kernel, their channel counts passed at launch,
# where at least SHARE_CHANNELS channel counts would share it (DenseNet-121: 258 -> 171
# kernels to compile; its GPU time +1 % on an H100). Elsewhere every extent is a constant of
# the source, as before: a runtime input plane or output extent cost up to 1.3x (immediate
# offsets become address arithmetic), and a layer that shares with nobody gains nothing.
SHARE_CHANNELS = 3
# The extents conv_tc.cu's generic kernel takes in its `Geo` (besides the channel counts).
GENERIC_EXTENTS = (
    "M", "OC", "OCP", "IH", "IW", "IHW", "OH", "OW", "HW", "SH", "SW", "PT", "PL", "DH", "DW",
    "KW", "MOC",
)  # fmt: skip


def geo_struct(c: int, ct: int, k: int, kp: int, ks: int) -> np.void:
    """The `Geo` argument of a shared conv_tc.cu kernel."""
    value = np.zeros((), GEO)
    value["C"], value["CT"], value["K"], value["KP"], value["KS"] = c, ct, k, kp, ks
    value["ct_mul"], value["ct_shr"] = magic(ct)
    return value[()]


# The generic kernel's `Geo` (conv_tc.cu with GENERIC): every extent, and the magic numbers of
# each divisor. A cold start runs the generic kernels first while each layer's own kernel
# compiles on the compile threads, then switches to those (program.py, "generic_kernels").
# Its epilogue too, where each activation has a code here (conv_tc.cu's act_at): up to EPI_PRE
# of them before a fused residual and EPI_POST after, with two parameters each; with the tile
# and the split at launch too, the ungrouped layers of a precision and output type share one
# generic GEMM (MobileNetV3-small at fp32: 13 generic GEMMs, one per tile and epilogue, came
# to 1).
EPI_PRE, EPI_POST = 4, 2
RT_CODES = {
    "Relu": 1, "Clip": 2, "LeakyRelu": 3, "PRelu": 4, "HardSigmoid": 5, "HardSwish": 6,
    "Sigmoid": 7, "Tanh": 8, "SiLU": 9,
}  # fmt: skip
check_covers("conv_tc.cu's act_at", RT_CODES)
EPI_FIELDS = [
    *[(f, np.int32) for f in ("pre", "post", "slope", "res")],
    ("code", np.int32, (EPI_PRE + EPI_POST,)),
    *[(f, np.float32, (EPI_PRE + EPI_POST,)) for f in ("pa", "pb")],
]
# conv.cu's generic `Ext`: every extent, then the epilogue's fields.
CONV_EXT = np.dtype(
    [(f, np.uint32) for f in (
        "total", "ohw", "ow", "oh", "nb", "c", "cg", "ihw", "ih", "iw", "wg", "kh", "kw", "sh",
        "sw", "dh", "dw", "mg", "oc")]
    + [("pt", np.int32), ("pl", np.int32)]
    + EPI_FIELDS,
    align=True,
)  # fmt: skip
GEO_ALL = np.dtype(
    [(f, np.int32) for f in ("C", "CT", "K", "KP", "KS")]
    + [("ct_mul", np.uint32), ("ct_shr", np.uint32)]
    + [(f, np.int32) for f in GENERIC_EXTENTS]
    + [(f"{d}_{m}", np.uint32) for d in ("hw", "ow", "kw", "oh", "oc") for m in ("mul", "shr")]
    + EPI_FIELDS,
    align=True,
)


def _act_args(kind: str, params: dict) -> tuple[float, float]:
    """An activation's two parameters as act_at takes them (Clip's absent bounds: -inf, inf)."""
    p = ACTIVATIONS[kind].resolve(params)
    if kind == "Clip":
        lo, hi = p["min"], p["max"]
        return (-np.inf if lo is None else lo), (np.inf if hi is None else hi)
    return p.get("alpha", 0.0), p.get("beta", 0.0)


def runtime_epilogue(steps) -> dict | None:
    """The epilogue fields of a generic `Geo` for conv_epilogue's `steps` (activations before
    the residual, after it, whether a slope is in the channel table, whether a residual is
    added), or None when it does not fit them (then the generic kernel has the epilogue in its
    source)."""
    acts, post, slope, residual = steps
    if len(acts) > EPI_PRE or len(post) > EPI_POST:
        return None
    fields = dict(pre=len(acts), post=len(post), slope=int(slope), res=int(residual))
    code = np.zeros(EPI_PRE + EPI_POST, np.int32)
    pa, pb = np.zeros_like(code, np.float32), np.zeros_like(code, np.float32)
    for at, (kind, params) in [*enumerate(acts), *enumerate(post, EPI_PRE)]:
        code[at] = RT_CODES[kind]
        pa[at], pb[at] = _act_args(kind, params)
    return dict(fields, code=code, pa=pa, pb=pb)


def generic_struct(
    g: dict, ct: int, k: int, kp: int, ks: int, ocp: int, epi: dict | None = None
) -> np.void:
    """The `Geo` argument of a generic conv_tc.cu kernel for the layer of geometry `g` (and
    its epilogue `epi`, runtime_epilogue's, when the kernel takes it at launch)."""
    value = np.zeros((), GEO_ALL)
    for name, v in (epi or {}).items():
        value[name] = v
    m = g["N"] * g["OH"] * g["OW"]
    extents = dict(
        C=g["C"], CT=ct, K=k, KP=kp, KS=ks, M=m, OC=g["OC"], OCP=ocp, IH=g["IH"], IW=g["IW"],
        IHW=g["IH"] * g["IW"], OH=g["OH"], OW=g["OW"], HW=g["OH"] * g["OW"], SH=g["SH"],
        SW=g["SW"], PT=g["PT"], PL=g["PL"], DH=g["DH"], DW=g["DW"], KW=g["KW"], MOC=m * g["OC"],
    )  # fmt: skip
    for name, v in extents.items():
        value[name] = v
    for d, v in (("ct", ct), ("hw", extents["HW"]), ("ow", g["OW"]), ("kw", g["KW"]),
                 ("oh", g["OH"]), ("oc", g["OC"])):  # fmt: skip
        value[f"{d}_mul"], value[f"{d}_shr"] = magic(v)
    return value[()]


def _generic_fits(g: dict, m: int, kp: int, ocp: int) -> bool:
    """Whether the generic kernel's int arithmetic (fast_div below 2**31) holds the layer."""
    sizes = (m * max(g["OC"], ocp), g["N"] * g["C"] * g["IH"] * g["IW"], kp * ocp * 2)
    return max(sizes) < 2**31


def _channel_free(plan, node) -> tuple:
    """What a convolution's kernel depends on but its input channels: its ops, the input
    but for its channels, the weights' output channels and window, attributes, residual."""
    n, _, *spatial = plan.info(node.inputs[0]).shape  # (a constant input too: EdgeNeXt)
    weights = plan.infos.get(node.inputs[1]) or plan.const(node.inputs[1])
    oc, _, *window = weights.shape
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
    return (conv_label(node), n, *spatial, oc, *window, attrs, node.meta.get("residual") is None)


def shares_channels(b) -> bool:
    """Whether this convolution takes its channel counts at launch: at least SHARE_CHANNELS
    convolutions of its plan differ from it only in their input channels."""
    plan = b.plan
    classes = getattr(plan, "_channel_classes", None)
    if classes is None:
        classes = {}
        for node in plan.nodes:
            if node.op in ("Conv", FUSED):
                try:
                    key = _channel_free(plan, node)
                except (KeyError, AttributeError, TypeError, ValueError):
                    continue
                classes.setdefault(key, set()).add(plan.info(node.inputs[0]).shape[1])
        plan._channel_classes = classes
    return len(classes.get(_channel_free(plan, b.node), ())) >= SHARE_CHANNELS


def conv_tensor_cores(b, g: dict, w: np.ndarray, bias: np.ndarray, group: int = 1) -> None:
    oc = g["OC"]
    m = g["N"] * g["OH"] * g["OW"]
    mode = _mode(b)
    # fp16: the weights rounded to fp16 (as PyTorch's .half()), or with the option float32's
    # as hi + lo fp16 parts (two MMAs a tile; then only the input's fp16 storage rounds)
    parts = 1 if mode == "tf32" else 2 if mode == "3xtf32" else 1 + _exact_weights(b)
    cg = g["C"] // group
    bn = _tile_shape(oc)[1]
    ct = g["C"] if group == 1 else bn // (oc // group) * cg  # input channels a tile reads
    bm, bn, wm, wn, threads, bk = tc_tile(m, oc, parts, mode, ct, _k_step(b))
    taps = g["KH"] * g["KW"]
    k = taps * ct
    kp = math.ceil(k / bk) * bk
    # (rows padded for the generic kernel's tile too, which may be wider: a multiple of both)
    pad = TC_TILES["wide"][1] if group == 1 else bn
    ocp = math.ceil(oc / pad) * pad
    # [OC][ky, kx, ci] (tap-major, as the kernel walks K). The hi + lo fp16 parts keep
    # float32's precision but for the low part's rounding (2^-22 relative), on fp16 tensor
    # cores. In float32 throughout: a float32 minus its fp16 rounding is exact in float32, and
    # NumPy's fp16 <-> float64 conversions are several times slower than float32's. At tf32:
    # rounded to tf32 once here; 3xTF32: as big + small tf32 parts, split from float32 on the
    # GPU as it is uploaded (Context.upload: half the bytes to pack, keep and upload).
    rows = (
        np.zeros((oc, taps, ct), np.float32) if group > 1 else np.empty((oc, taps, ct), np.float32)
    )
    taps_major = np.asarray(w).reshape(oc, cg, taps).transpose(0, 2, 1)  # [oc][tap][channel]
    if group == 1:
        rows[...] = taps_major  # (in float32 as it is copied)
    else:  # each row's channels where its group lies among the tile's groups
        at = (np.arange(oc) // (oc // group)) % (ct // cg) * cg
        for j in range(cg):
            rows[np.arange(oc), :, at + j] = taps_major[:, :, j]
    if (ocp, kp) == (oc, k):
        full = rows.reshape(oc, k)
    else:
        full = np.zeros((ocp, kp), np.float32)
        full[:oc, :k] = rows.reshape(oc, k)
    # Split K over blocks when the output tiles alone leave the GPU idle (deep, small layers).
    tiles = math.ceil(m / bm) * math.ceil(oc / bn)
    steps = kp // bk
    split = 1
    while (
        tiles * split * 2 <= b.ctx.sm_count * TC_FILL
        and steps % (split * 2) == 0
        and steps // (split * 2) >= 4
    ):
        split *= 2
    channels, tail, finish = conv_epilogue(b, g, bias)
    epi = runtime_epilogue(finish.pop("steps"))
    src = b.inputs[0]
    if _fp32_input(b):  # the stem: its input to fp16 first, as every intermediate is stored
        half = b.scratch("input_fp16", b.info(0).shape)
        emit(b, "a0", [Operand(b.info(0).shape, name=src)], half, "float")
        src = half
    if mode == "tf32":
        weights = [src, b.upload("weights", to_tf32(full), "float32")]
    elif mode == "3xtf32":  # big + small tf32 parts, in one array, split on the GPU
        weights = [src, b.upload("weights", full, "float32", split_tf32=True)]
    else:
        hi = to_half(full)
        weights = [src, b.upload("weights_hi", hi)]
        if parts == 2:
            weights.append(b.upload("weights_lo", to_half(full - hi.astype(np.float32))))
    a_per = bm * bk // threads
    shared = bool(b.option("conv_shared_kernels", True)) and shares_channels(b)
    params = dict(
        GENERIC=False,
        RT_EPI=False,
        CODES=RT_CODES,
        EPI_PRE=EPI_PRE,
        EPI_POST=EPI_POST,
        RUNTIME=shared,
        TF32=mode != "fp16",
        GROUPED=ct < g["C"],
        WHOLE_TAPS=ct % a_per == 0,
        OCP=ocp,
        X3=mode == "3xtf32",
        LO=parts == 2,
        G=group,
        CT=ct,
        **g,
        M=m,
        K=k,
        KP=kp,
        BM=bm,
        BN=bn,
        BK=bk,
        WM=wm,
        WN=wn,
        THREADS=threads,
        A_PER=a_per,
        SPLIT=split,
        **finish,
    )
    # The generic kernel a cold start may run first: every extent in its `Geo` argument.
    generic = None
    if _generic_fits(g, m, kp, ocp):
        # No extent in the source (WHOLE_TAPS: one way of gathering the patch, for any
        # channels), and of the split only whether there is one.
        gparams = dict(params, GENERIC=True, RUNTIME=False, SPLIT=min(split, 2))
        gparams.update(dict.fromkeys((*g, "M", "OCP", "K", "KP", "CT", "G", "WHOLE_TAPS")))
        gparams["rload"] = (
            load(finish["rt"], "res[(((size_t)n * g.OC + oc) * g.OH + oy) * g.OW + ox]")
            if finish["residual"]
            else ""
        )
        ggrid = None
        if epi is not None and group == 1:
            # One kernel for the ungrouped layers of a precision: the wide tile, K walked
            # TC_BK at a time, the split (if any) and the epilogue's activations and residual
            # in `Geo` (the residual's type the output's where there is none: not read).
            gbm, gbn, gwm, gwn = TC_TILES["wide"]
            rt = finish["rt"] if finish["residual"] else finish["yt"]
            gparams.update(
                RT_EPI=True, epilogue=[], post=[], has_slope=False, residual=True, rt=rt,
                rload=load(rt, "res[(((size_t)n * g.OC + oc) * g.OH + oy) * g.OW + ox]"),
                SPLIT=2, BM=gbm, BN=gbn, WM=gwm, WN=gwn, BK=TC_BK, label="Conv",
                A_PER=gbm * TC_BK // threads,
            )  # fmt: skip
            ggrid = (math.ceil(m / gbm), math.ceil(oc / gbn), split)
        generic = generic_struct(g, ct, k, kp, kp // split, ocp, epi), gparams, ggrid
    if shared:  # the channel counts at launch: a source without them (see SHARE_CHANNELS)
        for name in ("C", "CT", "K", "KP"):
            params[name] = None
        geo = [geo_struct(g["C"], ct, k, kp, kp // split)]
    else:
        geo = []

    y = b.outputs[0]
    res = tail or [y]  # (the generic kernels' residual argument: not read where none)

    def launch(args, grid, threads, entry, gargs, **how):
        """A launch of `entry` with its specialized source, and its generic one's: its `Geo`
        first, then `gargs` where it takes the epilogue at launch (every layer's the same
        arguments, on its own grid for `k`), else the specialized arguments (a shared
        kernel's own Geo left out)."""
        alt = None
        if generic is not None:
            value, gparams, ggrid = generic
            if ggrid is not None:
                alt = ([value, *gargs], dict(gparams, ENTRY=entry), ggrid if entry == "k" else grid)
            else:
                rest = args[len(geo) :] if entry == "k" else args
                alt = ([value, *rest], dict(gparams, ENTRY=entry))
                if entry == "zero" or (entry == "k" and split > 1):  # (no epilogue in them)
                    alt[1]["label"] = "Conv"

        b.launch("conv_tc.cu", args, grid, threads, entry=entry, ENTRY=entry, generic=alt,
                 **how, **params)  # fmt: skip

    grid = (math.ceil(m / bm), math.ceil(oc / bn), split)
    if split == 1:
        launch([*geo, *weights, channels, *tail, y], grid, threads, "k",
               [*weights, y, channels, *res, y], weight=TC_COMPILE_WEIGHT)  # fmt: skip
        return
    ws = b.scratch("partial", (m * oc,), "float32", precise=True)
    each = blocks(m * oc, 256)
    launch([ws], each, 256, "zero", [ws])
    launch([*geo, *weights, ws], grid, threads, "k", [*weights, ws, channels, *res, y],
           weight=TC_COMPILE_WEIGHT)  # fmt: skip
    launch([ws, channels, *tail, y], each, 256, "finish", [ws, channels, *res, y])


def _conv3d(b, transpose: bool = False) -> None:
    """A 3-D convolution (NCDHW, any groups, strides, dilations and padding), its bias
    (BatchNormalization folded in), activations and a fused residual: conv3d.cu; with
    `transpose`, a 3-D ConvTranspose (output padding too), its gather."""
    xi = b.info(0)
    window = conv_transpose_window if transpose else conv_window
    w, bias, kernel_shape, strides, dilations, geo = window(b)
    n, c, idp, ih, iw = xi.shape
    group = b.attrs["group"]
    _, oc, od, oh, ow = b.out().shape
    channels, tail, params = conv_epilogue(b, {"OC": oc, "OH": od * oh, "OW": ow}, bias)
    params.pop("steps")
    if params["residual"]:
        params["rload"] = load(params["rt"], "res[i]")  # (the output's own index)
    total = n * oc * od * oh * ow
    b.launch(
        "conv3d.cu",
        [b.inputs[0], b.upload("weights", w, "float32"), channels, *tail, b.outputs[0]],
        blocks(total, BLOCK),
        BLOCK,
        N=n, C=c, ID=idp, IH=ih, IW=iw, OC=oc, OD=od, OH=oh, OW=ow,
        KD=kernel_shape[0], KH=kernel_shape[1], KW=kernel_shape[2],
        SD=strides[0], SH=strides[1], SW=strides[2],
        DD=dilations[0], DH=dilations[1], DW=dilations[2],
        PF=geo[0][0], PT=geo[1][0], PL=geo[2][0],
        CG=c // group, MG=oc // group, TOTAL=total, BLOCK=BLOCK, xt=xi.ctype,
        xload=load(xi.ctype, "xr[ix]"), transpose=transpose, **params,
    )  # fmt: skip


@kernel("Conv", FUSED, supports=conv_supports_3d)
def conv(b):
    b.label = conv_label(b.node)
    xi = b.info(0)
    if len(xi.shape) == 5:
        _conv3d(b)
        return
    g = geometry(b)
    group = b.attrs["group"]
    w, bias = weights_and_bias(b, 0)
    if _tensor_cores(b, g, group):
        conv_tensor_cores(b, g, w, bias, group)
        return
    oc, cg = g["OC"], g["C"] // group
    mg = oc // group
    px, ocb = _work_split(g, group, mg, b.ctx.sm_count)
    nb = math.ceil(mg / ocb)
    kh, kw = g["KH"], g["KW"]
    # [group][block][ci][ky][kx][ocb], zero-padded past the group's channels.
    wp = np.zeros((group, nb * ocb, cg, kh, kw))
    wp[:, :mg] = w.reshape(group, mg, cg, kh, kw)
    wp = wp.reshape(group, nb, ocb, cg, kh, kw).transpose(0, 1, 3, 4, 5, 2)
    channels, tail, finish = conv_epilogue(b, g, bias)
    epi = runtime_epilogue(finish.pop("steps"))
    weights = b.upload("weights", wp, "float32")
    args = [b.inputs[0], weights, channels, *tail]
    d2s = b.node.meta.get("d2s")
    owg = math.ceil(g["OW"] / px)
    generic = None
    total = group * nb * g["OH"] * g["OW"]
    if epi is not None and d2s is None and total < 2**31:
        # Every extent and the epilogue at launch, one pixel a thread (on a grid of its own).
        value = np.zeros((), CONV_EXT)
        ext = dict(
            total=total, ohw=g["OH"] * g["OW"], ow=g["OW"], oh=g["OH"],
            nb=nb, c=g["C"], cg=cg, ihw=g["IH"] * g["IW"], ih=g["IH"], iw=g["IW"],
            wg=cg * kh * kw * ocb, kh=kh, kw=kw, sh=g["SH"], sw=g["SW"], dh=g["DH"],
            dw=g["DW"], mg=mg, oc=oc, pt=g["PT"], pl=g["PL"], **epi,
        )  # fmt: skip
        for name, v in ext.items():
            value[name] = v
        rt = finish["rt"] if finish["residual"] else b.out().ctype
        y = b.outputs[0]
        generic = (
            [value[()], b.inputs[0], weights, channels, *(tail or [y]), y],
            dict(
                GENERIC=True, OCB=ocb, BLOCK=BLOCK, xt=xi.ctype, yt=finish["yt"], rt=rt,
                ystore=finish["ystore"], EPI_PRE=EPI_PRE, EPI_POST=EPI_POST, CODES=RT_CODES,
                xload=load(xi.ctype, "xc[iy * e.iw + ix]"), label="Conv",
                rload=load(rt, "res[at]"),
            ),
            (blocks(ext["total"], BLOCK), 1, g["N"]),
        )  # fmt: skip
    b.launch(
        "conv.cu",
        [*args, b.outputs[0]],
        (blocks(group * nb * g["OH"] * owg, BLOCK), 1, g["N"]),
        BLOCK,
        generic=generic,
        GENERIC=False,
        **g,
        G=group,
        CG=cg,
        MG=mg,
        OCB=ocb,
        NB=nb,
        PX=px,
        OWG=owg,
        BLOCK=BLOCK,
        xt=xi.ctype,
        xload=load(xi.ctype, f"xc[iy * {g['IW']} + ix]"),
        **finish,
        d2s=d2s is not None,
        BS=d2s[0] if d2s else 1,
        dcr=d2s is not None and d2s[1] == "DCR",
    )


@kernel("ConvTranspose", supports=conv_supports_3d)
def conv_transpose(b):
    b.label = conv_label(b.node)
    xi, yo = b.info(0), b.out()
    if len(xi.shape) == 5:
        _conv3d(b, transpose=True)
        return
    w, bias, g = conv_transpose_geometry(b)
    group, cg, mg, oc = g["G"], g["CG"], g["MG"], g["OC"]
    n, oh, ow, kh, kw = g["N"], g["OH"], g["OW"], g["KH"], g["KW"]
    ocb = _block(mg)
    nb = math.ceil(mg / ocb)
    # ConvTranspose weights are [C][M/group][kh][kw]: [group][block][ci][ky][kx][ocb].
    wp = np.zeros((group, cg, nb * ocb, kh, kw))
    wp[:, :, :mg] = w.reshape(group, cg, mg, kh, kw)
    wp = wp.reshape(group, cg, nb, ocb, kh, kw).transpose(0, 2, 1, 4, 5, 3)
    acts, slope = epilogue(b, oc)
    chan = [bias] if slope is None else [bias, np.asarray(slope, np.float64)]
    b.launch(
        "conv_transpose.cu",
        [
            b.inputs[0],
            b.upload("weights", wp, "float32"),
            b.upload("channels", np.concatenate(chan), "float32"),
            b.outputs[0],
        ],
        (blocks(oh * ow, BLOCK), group * nb, n),
        BLOCK,
        **g, OCB=ocb, NB=nb, BLOCK=BLOCK,
        xt=xi.ctype, yt=yo.ctype,
        xload=load(xi.ctype, f"xc[iy * {g['IW']} + ix]"),
        ystore=store(yo.ctype, "r"),
        has_slope=slope is not None,
        epilogue=epilogue_code(acts, activation_code),
    )  # fmt: skip
