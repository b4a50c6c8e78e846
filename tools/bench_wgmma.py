"""Hopper warpgroup MMA throughput: wgmma.m64nNk16 (fp16 in, fp32 accumulate) by N, with A from
shared memory (SS) or registers (RS), on 1, 2 or 4 warpgroups a multiprocessor.

Each block (one per multiprocessor) issues, per iteration, PER wgmmas and waits for them, the wgmmas
taking ACCS accumulators in turn (1: one accumulator; 3: as the chain's layers issued them before
they took each accumulator's taps one after another); the multiprocessor's clock over the loop gives
the multiply-adds per cycle (the peak is 2048 on an H100 or H200: 989 dense fp16 TFLOP/s at 1.83 GHz
over 132 of them). This is what bounds the small-N products of the fused ESPCN chain (docs/cuda.md,
"On Hopper: warpgroup MMAs"): layer 3's N is 16, layer 2's 32.

    python tools/bench_wgmma.py [--n 16,24,32,64,128] [--per 9] [--accs 1,3] [--iters 2000]

Needs a GPU of compute capability 9.0 and CuPy (`pip install -e ".[cuda]"`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SMEM = 200 * 1024

HEAD = r"""
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lead, unsigned stride) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32);
}
"""

KERNEL = r"""
extern "C" __global__ void __launch_bounds__(512, 1)
k_{mode}_{n}_{per}_{accs}(float* o, int iters, long long* cyc) {{
    extern __shared__ __align__(128) unsigned char sm[];
    for (int i = threadIdx.x; i < {words}; i += blockDim.x)
        ((unsigned*)sm)[i] = 0x3c003c00u ^ (i * 2654435761u & 0x03ff03ffu);  // fp16 in [1, 2)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    float d[{accs}][{h}];
    for (int j = 0; j < {accs}; ++j)
        for (int i = 0; i < {h}; ++i) d[j][i] = 0.f;
    const unsigned a[4] = {{0x3c003c00u, 0x3c003c00u, 0x3c003c00u, threadIdx.x}};
    const unsigned base = (unsigned)__cvta_generic_to_shared(sm);
    const int wg = threadIdx.x / 128;
    // A: 64 x 16 per warpgroup (K-major core matrices, 2 KB); B: 16 x N (N / 8 blocks of two)
    const unsigned long long ad = desc(base + wg * 16384, 1024, 128);
    const unsigned long long bd = desc(base + 65536 + wg * 8192, 128, 256);
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {{
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < {per}; ++j) {{
            {issue}
        }}
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }}
    const long long t1 = clock64();
    float s = 0.f;
    for (int j = 0; j < {accs}; ++j)
        for (int i = 0; i < {h}; ++i) s += d[j][i];
    o[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}}
"""


def _issue(mode: str, n: int, accs: int) -> str:
    h = n // 2
    outs = ", ".join(f'"+f"(d[j % {accs}][{i}])' for i in range(h))
    regs = ",".join(f"%{i}" for i in range(h))
    if mode == "ss":
        return (
            f'asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, '
            f'%{h}, %{h + 1}, 1, 1, 1, 0, 0;\\n" : {outs} : "l"(ad + (j & 7) * 8), '
            f'"l"(bd + (j & 7) * 16));'
        )
    return (
        f'asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, '
        f'{{%{h},%{h + 1},%{h + 2},%{h + 3}}}, %{h + 4}, 1, 1, 1, 0;\\n" : {outs} : '
        f'"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bd + (j & 7) * 16));'
    )


def source(ns, pers, accss) -> str:
    from tinydl.backends.cuda.context import ARCH_SPECIFIC

    parts = [ARCH_SPECIFIC, HEAD]
    for n in ns:
        for mode in ("ss", "rs"):
            for per in pers:
                for accs in accss:
                    parts.append(
                        KERNEL.format(
                            mode=mode,
                            n=n,
                            per=per,
                            accs=accs,
                            h=n // 2,
                            words=SMEM // 4,
                            issue=_issue(mode, n, accs),
                        )
                    )
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="16,24,32,64,128", help="N sizes (multiples of 8, <= 128)")
    ap.add_argument("--per", default="9", help="wgmmas issued between waits (default 9)")
    ap.add_argument("--accs", default="1", help="accumulators the wgmmas take in turn (default 1)")
    ap.add_argument("--iters", type=int, default=2000, help="iterations a block")
    args = ap.parse_args()
    ns = [int(v) for v in args.n.split(",")]
    pers = [int(v) for v in args.per.split(",")]
    accss = [int(v) for v in args.accs.split(",")]
    if any(n % 8 or not 8 <= n <= 128 for n in ns):
        sys.exit(f"--n: expected multiples of 8 from 8 to 128, got {args.n}")

    import cupy as cp

    from tinydl.backends.cuda.context import compile_cubin

    dev = cp.cuda.Device()
    cc = dev.compute_capability
    if cc != "90":
        sys.exit(f"wgmma needs compute capability 9.0; this GPU is {cc[:-1]}.{cc[-1]}")
    sms = dev.attributes["MultiProcessorCount"]
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()
    cubin = compile_cubin(source(ns, pers, accss), "sm_90", "wgmma throughput")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wgmma.cubin"
        path.write_bytes(cubin)
        mod = cp.RawModule(path=str(path))
        mod.get_function(f"k_ss_{ns[0]}_{pers[0]}_{accss[0]}")  # (loaded now)
    out = cp.zeros(sms * 512, cp.float32)
    cyc = cp.zeros(sms, cp.int64)
    print(f"{name}, {sms} SMs; multiply-adds per cycle per SM (peak 2048), cycles per wgmma")
    print(
        f"{'A':>3} {'N':>4} {'warpgroups':>10} {'per wait':>8} {'accs':>4} {'MAC/clk/SM':>11} "
        f"{'clk/wgmma':>10}"
    )
    for n in ns:
        for mode in ("ss", "rs"):
            for groups in (1, 2, 4):
                for per in pers:
                    for accs in accss:
                        fn = mod.get_function(f"k_{mode}_{n}_{per}_{accs}")
                        fn.max_dynamic_shared_size_bytes = SMEM
                        for iters in (10, args.iters):
                            fn(
                                (sms,),
                                (groups * 128,),
                                (out, np.int32(iters), cyc),
                                shared_mem=SMEM,
                            )
                        cp.cuda.Device().synchronize()
                        clocks = float(cp.median(cyc.astype(cp.float64)))
                        macs = 64 * n * 16 * per * args.iters * groups
                        print(
                            f"{mode.upper():>3} {n:4d} {groups:10d} {per:8d} {accs:4d} "
                            f"{macs / clocks:11.0f} {clocks / (per * args.iters):10.1f}"
                        )


if __name__ == "__main__":
    main()
