// {{ label }}: three convolutions fused into one kernel (tile fusion), fp16 tensor cores
// (mma.sync m16n8k16, fp32 accumulation).
// Image {{ N }}x{{ C0 }}x{{ H }}x{{ W }} -> {{ C1 }} ({{ K1 }}x{{ K1 }}) -> {{ C2 }} ({{ K2 }}x{{ K2 }})
// -> {{ C3 }} ({{ K3 }}x{{ K3 }}){% if BS > 1 %} -> DepthToSpace {{ BS }}{% endif %}, stride 1, "same" zero padding.
// Each block owns a {{ TH }}x{{ TW }} output tile at a time (persistent over {{ TILES }} tiles):
// it loads the input tile with a {{ R0 }}-pixel halo, computes layer 1 on the tile + {{ R1 }},
// layer 2 on the tile + {{ R2 }}, and layer 3 on the tile, keeping both intermediates in shared
// memory (pixel-major, channels contiguous, rows padded against bank conflicts). Each layer is
// an implicit GEMM: M = pixels of its region, N = output channels, K = taps x input channels.
// Intermediates outside the image are zero, as the unfused convolutions' padding is.

#define THREADS {{ THREADS }}
#define WARPS {{ THREADS // 32 }}
#define MB1 {{ MB1 }}
#define MB2 {{ MB2 }}
#define MB3 {{ MB3 }}

{% include "mma.cuh" %}
{% if WGMMA %}
{{ ARCH_SPECIFIC }}
{% include "wgmma.cuh" %}
#define GROUPS {{ THREADS // 128 }}
{% endif %}
{% raw %}

__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return (unsigned)f2h(lo) | ((unsigned)f2h(hi) << 16);
}

// A lane's two channels (2t, 2t + 1) of each of a layer's NT n8 tiles of `bias`, in registers.
template <int NT>
__device__ __forceinline__ void bias_regs(float (&b)[NT][2], const float* bias, int t) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        b[n][0] = bias[n * 8 + 2 * t];
        b[n][1] = bias[n * 8 + 2 * t + 1];
    }
}

__device__ __forceinline__ float tanh_fast_(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
{% endraw %}

{# Layer 1's outputs at pixel p of its region, row g + 8 h of a lane's accumulators (zero outside
   the image, and where `valid` is false): for each of the lane's channel pairs, `acc0` and
   `acc1` plus the bias (unless the MMA added it: `bias` false) through the activations, packed
   to half2 at `dst` (each path's own layout of the intermediate). #}
{% macro store1(acc0, acc1, dst, bias=True, valid="") %}
                const int py = p / {{ W1 }}, px = p % {{ W1 }};
                const int gy = y0 - {{ R1 }} + py, gx = x0 - {{ R1 }} + px;
                const bool in = {{ valid ~ " && " if valid }}(unsigned)gy < {{ H }}u && (unsigned)gx < {{ W }}u;
#pragma unroll
                for (int n = 0; n < {{ NT1 }}; ++n) {
{% if bias %}
                    const int ch = n * 8 + 2 * t;
                    const float r0 = {{ acc0 }} + bias1[ch], r1 = {{ acc1 }} + bias1[ch + 1];
{% else %}
                    const float r0 = {{ acc0 }}, r1 = {{ acc1 }};
{% endif %}
                    *(unsigned*)({{ dst }}) = in ? epilogue1(r0, r1) : 0u;
                }
{% endmacro %}

{# The value of `vals` at index wg + `at` (`vals`: where each warpgroup's share of some tiles
   begins, then their count). #}
{% macro by_wg(vals, at=0) %}{% set n = vals | length - 1 %}{% for v in vals[at:at + n - 1] %}wg == {{ loop.index0 }} ? {{ v }} : {% endfor %}{{ vals[at + n - 1] }}{% endmacro %}

{# Layer 3's outputs from a warpgroup's accumulators acc3[0] to acc3[`count` - 1]: `pos` sets
   the pixel (py, px) of the tile of row g + 8 h of a lane's accumulators m; bias, activations
   and the store (store3) where it is in the tile and the image. #}
{% macro layer3_out(count, pos) %}
                {{ yt }}* yo = y + (size_t)img * {{ C3 * H * W }};
                float b3[{{ NT3 }}][2];
                bias_regs(b3, bias3, t);
#pragma unroll
                for (int m = 0; m < {{ count }}; ++m) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        {{ pos }}
                        if (py >= {{ TH }} || px >= {{ TW }}) continue;
                        const int gy = y0 + py, gx = x0 + px;
                        if (gy >= {{ H }} || gx >= {{ W }}) continue;
{{ store3("acc3[m][4 * n + 2 * h + e] + b3[n][e]") }}
                    }
                }
{% endmacro %}

{# Layer 3 of tile (img, y0, x0) on a warpgroup: `count` m64 tiles from `first` (known at
   compile time: no branches in the wgmma sequence). #}
{% macro layer3(count, first) %}
            {
                constexpr int CNT = {{ count }};
                const int first = {{ first }};
                float acc3[CNT][{{ NT3 * 4 }}];
                int row0[CNT];
#pragma unroll
                for (int m = 0; m < CNT; ++m) row0[m] = (first + m) * 64;
                wg_conv<{{ NT3 * 8 }}, CNT, {{ K3 * K3 * C2 // 16 }}, {{ C2 // 16 }}, {{ K3 }}, {{ W2 }}, {{ P2 * 16 }}>(
                    acc3, row0, smem_addr(s2), smem_addr(B3));
                wgmma_wait<0>();
{{ layer3_out("CNT", "const int r = (first + m) * 64 + q * 16 + g + 8 * h;\n                        const int py = r / " ~ W2 ~ ", px = r % " ~ W2 ~ ";") -}}
            }
{% endmacro %}

{# The MMAs of a layer that reuses its A rows across taps from registers (layers 2 and 3,
   REUSE2 and REUSE3): `rows` M tiles a warp into accumulators `acc`, each `ph` output rows of
   16 / ph pixels (from row r0, column segment at a0: reuse_base), from the previous layer's
   rows r0 to r0 + ph rows + k - 2 (`k` its kernel size, `c` its channels, `nt` the layer's
   n8 tiles; rows past `last_row` clamped, `width` pixels a row, planes of 8 channels `plane`
   pixels apart). For a column offset dx and a 16-channel chunk cc (a step) those rows are
   loaded once (ldmatrix), and row j is tap dy's A for output row j - dy: with ph 1, f[j] is
   M tile j - dy's whole A; with ph 2 (pieces of 8 pixels), f[j] holds row j's two 8x8 matrices
   (k 0-7, 8-15), and M tile m's A for tap dy takes rows 2 m + dy and 2 m + dy + 1 as its
   fragment's rows g and g + 8 (a fifth fewer loads at three tiles a warp). One register set:
   with two, loading the next rows while the MMAs run, ptxas ran out of registers
   (docs/cuda.md). #}
{% macro reuse_mmas(rows, k, c, nt, acc, last_row, width, plane, ph) %}
{% if ph == 2 %}
                unsigned f[2 * {{ rows }} + {{ k - 1 }}][2];
                auto load = [&](int dx, int cc) {
#pragma unroll
                    for (int j = 0; j < 2 * {{ rows }} + {{ k - 1 }}; j += 2) {
                        unsigned r[4];  // rows j and j + 1 (lanes 8-15, 24-31), k 0-7 and 8-15
                        ldmatrix_x4(r, a0 + 16u * (min(r0 + j + ((lane >> 3) & 1), {{ last_row }}) * {{ width }} + dx) + cc * {{ 2 * plane * 16 }}u);
                        f[j][0] = r[0], f[j + 1][0] = r[1], f[j][1] = r[2], f[j + 1][1] = r[3];
                    }
                };
{% else %}
                unsigned f[{{ rows }} + {{ k - 1 }}][4];
                auto load = [&](int dx, int cc) {
#pragma unroll
                    for (int j = 0; j < {{ rows }} + {{ k - 1 }}; ++j)
                        ldmatrix_x4(f[j], a0 + 16u * (min(r0 + j, {{ last_row }}) * {{ width }} + dx) + cc * {{ 2 * plane * 16 }}u);
                };
{% endif %}
                load(0, 0);
#pragma unroll
                for (int st = 0; st < {{ k * c // 16 }}; ++st) {
                    const int dx = st / {{ c // 16 }}, cc = st % {{ c // 16 }};
                    wgmma_fence();
#pragma unroll
                    for (int dy = 0; dy < {{ k }}; ++dy) {
                        const unsigned long long b = bd + ((((dy * {{ k }} + dx) * {{ c // 16 }} + cc) * {{ nt * 8 * 32 }}) >> 4);
#pragma unroll
                        for (int m = 0; m < {{ rows }}; ++m) {
{% if ph == 2 %}
                            const unsigned a[4] = {f[2 * m + dy][0], f[2 * m + dy + 1][0], f[2 * m + dy][1], f[2 * m + dy + 1][1]};
{% else %}
                            const unsigned* a = f[m + dy];
{% endif %}
                            if (st == 0 && dy == 0)
                                Wgmma<{{ nt * 8 }}>::mma0_rs({{ acc }}[m], a, b);
                            else
                                Wgmma<{{ nt * 8 }}>::mma_rs({{ acc }}[m], a, b);
                        }
                    }
                    wgmma_commit();
                    wgmma_wait<0>();  // this step's registers are loaded next
                    if (st + 1 < {{ k * c // 16 }}) load((st + 1) / {{ c // 16 }}, (st + 1) % {{ c // 16 }});
                }
{% endmacro %}

{# A lane's first A row address for reuse_mmas over `region` (planes `plane` pixels apart) in
   segment `cs` of 16 / ph pixels: its row of the first 8x8 matrix it addresses, k 0-7 for lanes
   0-15, 8-15 for the others (with ph 2, lanes 8-15 and 24-31 address the next row: load). #}
{% macro reuse_base(region, plane, ph) -%}
smem_addr({{ region }}) + 16u * ({% if ph == 2 %}cs * 8 + (lane & 7){% else %}cs * 16 + (lane & 15){% endif %}) + (lane >> 4) * {{ plane * 16 }}u
{%- endmacro %}

{# Pixel (py, px) of row g + 8 h of M tile m's accumulators in reuse_mmas (warp rows from r0,
   column segment cs). #}
{% macro reuse_pixel(ph) -%}
{% if ph == 2 %}const int py = r0 + 2 * m + h, px = cs * 8 + g;{% else %}const int py = r0 + m, px = cs * 16 + g + 8 * h;{% endif %}
{%- endmacro %}

{# Layer 3 of tile (img, y0, x0) on a warpgroup, A from registers reused across taps (REUSE3,
   as layer 2's): warp q takes column segment q % SEG3 (16 / PH3 pixels) of `count` / (4 /
   SEG3) output rows from `first` + (q / SEG3) times that. #}
{% macro layer3_rows(count, first) %}
            {
                constexpr int R3 = {{ count // (PH3 * (4 // SEG3)) }};
                const int r0 = ({{ first }}) + (q / {{ SEG3 }}) * {{ PH3 }} * R3, cs = q % {{ SEG3 }};
                const unsigned a0 = {{ reuse_base("s2", P2, PH3) }};
                const unsigned long long bd = wgmma_desc(smem_addr(B3), 128, 256);
                float acc3[R3][{{ NT3 * 4 }}];
{{ reuse_mmas("R3", K3, C2, NT3, "acc3", H2 - 1, W2, P2, PH3) }}
{{ layer3_out("R3", reuse_pixel(PH3)) -}}
            }
{% endmacro %}

{# Folded layer 3 (FOLD3): its column offsets dx in N. A warp's M rows are one segment of 16
   pixels of a row of layer 2's region, K runs over the row offsets dy and the channels, and
   B's column (dx, o) (chain.py's _fold_col) holds the weights of output channel o at offset
   dx, so that accumulator column (dx, o) at region pixel X is P_dx[X], and output pixel x of
   the row is the sum of P_dx[x + dx] over dx: a lane holds pixels g and g + 8 of each segment
   (groups of 8 pixels k, 2 a segment), pixel x + dx sits dx lanes of 4 on (in group k + 1
   where g + dx passes 8), and the same channels of every offset in the same lane (blocks of
   8, FA3 of them; the FR3 channels past them, offset-major after those, each in the lane
   _fold_col says). Warp q of a warpgroup takes rows `first` + q, + 4, ... (`count` rows, a
   multiple of 4: every warp issues every wgmma); rows past the tile compute what nobody
   stores. #}
{% macro fold_acc(k, n, e) %}acc[{{ k // 2 }}][{{ 4 * n + 2 * (k % 2) + e }}]{% endmacro %}
{% macro fold_sum(k, cols) %}
{# the sum over dx of column cols[dx] (at pixel x + dx) for this lane's pixel of group k #}
{% set c0 = cols[0] %}
                        float v = {{ fold_acc(k, c0 // 8, c0 % 2) }};
{% for c in cols[1:] %}
{% set dx = loop.index %}
{% set nxt = [k + 1, 2 * SEGF - 1] | min %}
                        v += __shfl_sync(0xffffffffu, g < {{ dx }} ? {{ fold_acc(nxt, c // 8, c % 2) }} : {{ fold_acc(k, c // 8, c % 2) }}, (((g + {{ dx }}) & 7) * 4 + {{ (c % 8) // 2 - (c0 % 8) // 2 }} + t) & 31);
{% endfor %}
{% endmacro %}
{% macro layer3_fold(count, first) %}
            {
                // (q through a shuffle, as wg: the rows' branches then do not diverge)
                const int first = ({{ first }}) + __shfl_sync(0xffffffffu, q, 0);
                const unsigned a0 = smem_addr(s2) + 16u * (lane & 15) + (lane >> 4) * {{ P2 * 16 }}u;
                const unsigned long long bd = wgmma_desc(smem_addr(B3), 128, 256);
                {{ yt }}* yo = y + (size_t)img * {{ C3 * H * W }};
#pragma unroll 1
                for (int bt = 0; bt < {{ count // 4 }}; ++bt) {
                    const int row = first + 4 * bt;
                    float acc[{{ SEGF }}][{{ NF3 // 2 }}];
#pragma unroll
                    for (int cc = 0; cc < {{ C2 // 16 }}; ++cc) {
                        unsigned f[{{ SEGF }}][{{ K3 }}][4];
#pragma unroll
                        for (int s = 0; s < {{ SEGF }}; ++s) {
#pragma unroll
                            for (int dy = 0; dy < {{ K3 }}; ++dy)
                                ldmatrix_x4(f[s][dy], a0 + 16u * (min(row + dy, {{ H2 - 1 }}) * {{ W2 }} + s * 16) + cc * {{ 2 * P2 * 16 }}u);
                        }
                        wgmma_fence();
#pragma unroll
                        for (int dy = 0; dy < {{ K3 }}; ++dy) {
                            const unsigned long long b = bd + (((dy * {{ C2 // 16 }} + cc) * {{ NF3 * 32 }}) >> 4);
#pragma unroll
                            for (int s = 0; s < {{ SEGF }}; ++s) {
                                if (cc == 0 && dy == 0)
                                    Wgmma<{{ NF3 }}>::mma0_rs(acc[s], f[s][dy], b);
                                else
                                    Wgmma<{{ NF3 }}>::mma_rs(acc[s], f[s][dy], b);
                            }
                        }
                        wgmma_commit();
                        wgmma_wait<0>();  // (both chunks' A at once, one wait: no faster)
                    }
                    const int gy = y0 + row;
                    if (row >= {{ TH }} || gy >= {{ H }}) continue;  // (the same for a whole warp)
{% for k in range(2 * SEGF) %}
                    {
                        const int gx = x0 + {{ 8 * k }} + g;
                        const bool out = {{ 8 * k }} + g < {{ TW }} && gx < {{ W }};
{% for j in range(FA3) %}
{% for e in range(2) %}
                        {
{{ fold_sum(k, FOLD_COLS[8 * j + e]) -}}
                            const int ch = {{ 8 * j + e }} + 2 * t;
                            if (out) {
{{ put3("v + bias3[ch]") }}
                            }
                        }
{% endfor %}
{% endfor %}
{% for c in range(FR3) %}
{% set c0 = FOLD_COLS[8 * FA3 + c][0] %}
                        {
{{ fold_sum(k, FOLD_COLS[8 * FA3 + c]) -}}
                            const int ch = {{ 8 * FA3 + c }};
                            if (out && t == {{ (c0 % 8) // 2 }}) {
{{ put3("v + bias3[ch]") }}
                            }
                        }
{% endfor %}
                    }
{% endfor %}
                }
            }
{% endmacro %}

{# Layer 3 on warpgroups: `calls` holds, for each count of m64 tiles, the warpgroups that take
   that many and the first tile of each. #}
{% macro layer3_calls(calls) %}
{% for count, firsts in calls %}
            if ({% for w, _ in firsts %}wg == {{ w }}{{ " || " if not loop.last }}{% endfor %})
{% set first %}{% for w, f in firsts[:-1] %}wg == {{ w }} ? {{ f }} : {% endfor %}{{ firsts[-1][1] }}{% endset %}
{% if FOLD3 %}
{{ layer3_fold(count, first) -}}
{% elif REUSE3 %}
{{ layer3_rows(count, first) -}}
{% else %}
{{ layer3(count, first) -}}
{% endif %}
{% endfor %}
{% endmacro %}

{# Layer 3's outputs at pixel (gy, gx), row g + 8 h of a lane's accumulators: for each of the
   lane's channels ch, `value` (the accumulator plus the bias), the activations, then the store
   (through DepthToSpace when there is one). #}
{% macro store3(value) %}
#pragma unroll
    for (int n = 0; n < {{ NT3 }}; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int ch = n * 8 + 2 * t + e;
            if (ch >= {{ C3 }}) continue;
{{ put3(value) }}
        }
    }
{% endmacro %}

{# Layer 3's output channel ch at pixel (gy, gx): `value`, the activations, the store (through
   DepthToSpace when there is one). #}
{% macro put3(value) %}
            float r = {{ value }};
{% for e in act3 %}
            r = {{ e }};
{% endfor %}
{% if BS > 1 %}
{% if dcr %}
            const int c_ = ch % {{ OCF }}, ij = ch / {{ OCF }};
{% else %}
            const int c_ = ch / {{ BS * BS }}, ij = ch % {{ BS * BS }};
{% endif %}
            yo[((size_t)c_ * {{ H * BS }} + gy * {{ BS }} + ij / {{ BS }}) * {{ W * BS }} + gx * {{ BS }} + ij % {{ BS }}] = {{ ystore }};
{% else %}
            yo[((size_t)ch * {{ H }} + gy) * {{ W }} + gx] = {{ ystore }};
{% endif %}
{%- endmacro %}

// Epilogues of layers 1 and 2: activation of two adjacent channels, packed as fp16x2.
{% for name, acts, tanh2 in epilogues %}
__device__ __forceinline__ unsigned {{ name }}(float r0, float r1) {
{% if tanh2 %}
    const unsigned h = pack2(r0, r1);
    unsigned y;
    asm("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(h));
    return y;
{% else %}
    float r = r0;
{% for e in acts %}
    r = {{ e }};
{% endfor %}
    r0 = r;
    r = r1;
{% for e in acts %}
    r = {{ e }};
{% endfor %}
    return pack2(r0, r);
{% endif %}
}
{% endfor %}

// Regions (pixels): input {{ HI }}x{{ WI }}, layer 1 {{ H1 }}x{{ W1 }}, layer 2 {{ H2 }}x{{ W2 }}, out {{ TH }}x{{ TW }}.
// Shared memory (bytes): fragments and biases [0, {{ WBYTES }}), input at {{ OFF_IN }},
// layer 1 at {{ OFF_L1 }} (stride {{ S1 }} halves), layer 2 at {{ OFF_L2 }} (stride {{ S2 }}).
extern "C" __global__ void __launch_bounds__(THREADS, 1) k(
    const {{ xt }}* __restrict__ x,
    const uint4* __restrict__ wpack,
    {{ yt }}* __restrict__ y)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const uint4* B1 = (const uint4*)(smem + {{ OFF_B1 }});
    const uint4* B2 = (const uint4*)(smem + {{ OFF_B2 }});
    const uint4* B3 = (const uint4*)(smem + {{ OFF_B3 }});
{% if not BIAS1K %}
    const float* bias1 = (const float*)(smem + {{ OFF_BIAS1 }});
{% endif %}
    const float* bias2 = (const float*)(smem + {{ OFF_BIAS2 }});
    const float* bias3 = (const float*)(smem + {{ OFF_BIAS3 }});
    half_t* sin = (half_t*)(smem + {{ OFF_IN }});
    half_t* s1 = (half_t*)(smem + {{ OFF_L1 }});
    half_t* s2 = (half_t*)(smem + {{ OFF_L2 }});

    // Layer 1's weights and bias (the pack's first OFF_B2 bytes) and the first input tile:
    // every load issued before the first store (one wait for memory, not one a round). The
    // other layers' weights come with cp.async during the first tile's layer 1, waited for
    // before its layer 2 (docs/cuda.md).
{% set W1END = OFF_B2 // 16 %}
{% set NW = (W1END + THREADS - 1) // THREADS %}
    uint4 w_[{{ NW }}];
#pragma unroll
    for (int j = 0; j < {{ NW }}; ++j) {
        const int i = threadIdx.x + j * THREADS;
        if (i < {{ W1END }}) w_[j] = wpack[i];
    }

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
{% if WGMMA %}
    // Warpgroup `wg` (warps 4 wg to 4 wg + 3), warp q of it. (`wg` through a shuffle: the
    // compiler then knows it is one value across each warp, so branches on it do not diverge,
    // and does not serialize the wgmmas around them.)
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), q = warp & 3;
{% endif %}

    // Layer 1's A operand is gathered from the input tile: this lane's K indices per K chunk
    // are 2t, 2t+1, 2t+8, 2t+9 (+16 per chunk); their offsets into the input region.
    int off1[{{ NK1 }}][4];
#pragma unroll
    for (int kc = 0; kc < {{ NK1 }}; ++kc) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int kk = kc * 16 + 2 * t + (j & 1) + (j >> 1) * 8;
            const int tap = kk / {{ C0 }}, c = kk % {{ C0 }};
            off1[kc][j] = kk < {{ KT1 }} ? ((tap / {{ K1 }}) * {{ WI }} + tap % {{ K1 }}) * {{ C0 }} + c : -1;
        }
    }
{% if BIAS1K %}
    // Layer 1's bias comes through K index KT1 = {{ KT1 }}, past its taps: A is 1 there (this
    // lane's register {{ BIAS1K_R }} of K chunk {{ KT1 // 16 }} where 2t is {{ BIAS1K_T2 }}) and B1's row holds the bias
    // (no bias loads in the epilogue: its shared-memory loads cost more than the MMA's row).
    const unsigned one1 = 2 * t == {{ BIAS1K_T2 }} ? {{ "0x3C000000u" if KT1 % 2 else "0x3C00u" }} : 0u;
{% endif %}

    // The input tile of tile `t` (with its halo) goes through registers: loaded from global
    // memory during layer 2 of the previous tile, stored to shared memory after it.
    float pre[{{ NPRE }}];
    auto fetch = [&](int t) {
        const int img = t / {{ TY * TX }};
        const int y0 = ((t / {{ TX }}) % {{ TY }}) * {{ TH }}, x0 = (t % {{ TX }}) * {{ TW }};
        const {{ xt }}* xi = x + (size_t)img * {{ C0 * H * W }};
#pragma unroll
        for (int j = 0; j < {{ NPRE }}; ++j) {
            const int i = threadIdx.x + j * THREADS;
            const int px = i / {{ C0 }}, c = i % {{ C0 }};
            const int gy = y0 - {{ R0 }} + px / {{ WI }}, gx = x0 - {{ R0 }} + px % {{ WI }};
            const bool in = i < {{ HI * WI * C0 }} && (unsigned)gy < {{ H }}u && (unsigned)gx < {{ W }}u;
            pre[j] = in ? {{ xload }} : 0.0f;
        }
    };
    auto commit = [&]() {
#pragma unroll
        for (int j = 0; j < {{ NPRE }}; ++j) {
            const int i = threadIdx.x + j * THREADS;
            if (i < {{ HI * WI * C0 }}) sin[i] = f2h(pre[j]);
        }
    };
    if (blockIdx.x < {{ TILES }}) fetch(blockIdx.x);
#pragma unroll
    for (int j = 0; j < {{ NW }}; ++j) {
        const int i = threadIdx.x + j * THREADS;
        if (i < {{ W1END }}) ((uint4*)smem)[i] = w_[j];
    }
{% if WGMMA %}
    fence_proxy_async();  // layer 1 reads its weights through wgmma
{% endif %}
    if (blockIdx.x < {{ TILES }}) commit();
    for (int i = {{ W1END }} + threadIdx.x; i < {{ WBYTES // 16 }}; i += THREADS)
        cp_async16(smem_addr(smem + 16 * i), wpack + i);
    cp_async_commit();

    // Each layer as a function of the tile's origin. Layer 1 hands out its m16 tiles from the
    // last warp down, so the warps with the most layer-3 work get the least layer-1 work when
    // the two share a phase (below).
{% if WGMMA %}
    // Layer 1 on warpgroups too: warpgroup wg takes m64 tiles L1_SPLIT[wg] to L1_SPLIT[wg + 1] - 1
    // (most of them on the warpgroups that do not run layer 3, with which layer 1 shares a
    // phase), A gathered into registers (warp q's 16 rows of the tile, mma.sync's A layout), B
    // from shared memory.
    // (The first tile's layer 1, alone in its phase, is split evenly: L1_EVEN.)
    auto layer1 = [&](int y0, int x0, int mt1_lo, int mt1_hi) {
        const unsigned long long bd = wgmma_desc(smem_addr(B1), 128, 256);
        for (int mt = mt1_lo; mt < mt1_hi; ++mt) {
            int base[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int p = (mt * 4 + q) * 16 + g + 8 * h;
                p = p < {{ M1 }} ? p : {{ M1 - 1 }};
                base[h] = ((p / {{ W1 }}) * {{ WI }} + p % {{ W1 }}) * {{ C0 }};
            }
            unsigned a[{{ NK1 }}][4];
#pragma unroll
            for (int kc = 0; kc < {{ NK1 }}; ++kc) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int h = r & 1, j0 = (r >> 1) * 2;
                    const unsigned lo = off1[kc][j0] >= 0 ? sin[base[h] + off1[kc][j0]] : 0u;
                    const unsigned hi = off1[kc][j0 + 1] >= 0 ? sin[base[h] + off1[kc][j0 + 1]] : 0u;
                    a[kc][r] = lo | (hi << 16);
{% if BIAS1K %}
                    if (kc == {{ KT1 // 16 }} && (r >> 1) == {{ BIAS1K_R // 2 }}) a[kc][r] |= one1;
{% endif %}
                }
            }
            float acc[{{ NT1 * 4 }}];
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < {{ NK1 }}; ++kc) {
                if (kc == 0)
                    Wgmma<{{ C1 }}>::mma0_rs(acc, a[kc], bd);
                else
                    Wgmma<{{ C1 }}>::mma_rs(acc, a[kc], bd + ((kc * {{ C1 * 32 }}) >> 4));
            }
            wgmma_commit();
            wgmma_wait<0>();
            // (rows past the region store zeros into the planes' padding: no divergence)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int p = (mt * 4 + q) * 16 + g + 8 * h;
{{ store1("acc[4 * n + 2 * h]", "acc[4 * n + 2 * h + 1]", "s1 + n * " ~ P1 * 8 ~ " + p * 8 + 2 * t", bias=not BIAS1K, valid="p < " ~ M1) -}}
            }
        }
    };
{% else %}
    auto layer1 = [&](int y0, int x0, int, int) {
            // -- layer 1: input -> s1 ----------------------------------------------------------------
            for (int mt0 = (WARPS - 1 - warp) * MB1; mt0 < {{ MT1 }}; mt0 += WARPS * MB1) {
                float acc[MB1][{{ NT1 }}][4];
                int base[MB1][2];
    #pragma unroll
                for (int m = 0; m < MB1; ++m) {
    #pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        int p = (mt0 + m) * 16 + g + 8 * h;
                        p = p < {{ M1 }} ? p : {{ M1 - 1 }};
                        base[m][h] = ((p / {{ W1 }}) * {{ WI }} + p % {{ W1 }}) * {{ C0 }};
                    }
    #pragma unroll
                    for (int n = 0; n < {{ NT1 }}; ++n)
                        acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
                }
    #pragma unroll
                for (int kc = 0; kc < {{ NK1 }}; ++kc) {
                    unsigned a[MB1][4];
    #pragma unroll
                    for (int m = 0; m < MB1; ++m) {
    #pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const int h = r & 1, j0 = (r >> 1) * 2;
                            const unsigned lo = off1[kc][j0] >= 0 ? sin[base[m][h] + off1[kc][j0]] : 0u;
                            const unsigned hi = off1[kc][j0 + 1] >= 0 ? sin[base[m][h] + off1[kc][j0 + 1]] : 0u;
                            a[m][r] = lo | (hi << 16);
                        }
                    }
    #pragma unroll
                    for (int n = 0; n < {{ NT1 // 2 }}; ++n) {
                        const uint4 b = B1[(kc * {{ NT1 // 2 }} + n) * 32 + lane];
    #pragma unroll
                        for (int m = 0; m < MB1; ++m) {
                            mma16816(acc[m][2 * n], a[m], b.x, b.y);
                            mma16816(acc[m][2 * n + 1], a[m], b.z, b.w);
                        }
                    }
                }
    #pragma unroll
                for (int m = 0; m < MB1; ++m) {
    #pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int p = (mt0 + m) * 16 + g + 8 * h;
                        if (mt0 + m >= {{ MT1 }} || p >= {{ M1 }}) continue;
{{ store1("acc[m][n][2 * h]", "acc[m][n][2 * h + 1]", "s1 + p * " ~ S1 ~ " + ch") -}}
                    }
                }
            }
    };
{% endif %}
{% if WGMMA %}
    // Layers 2 and 3 on warpgroups (wgmma, both operands in shared memory): warpgroup `wg`
    // takes m64 tiles wg * MB to wg * MB + MB - 1, warp q of it rows 16 q to 16 q + 15 of each,
    // as a lane's accumulators say (mma.sync's layout). Their M rows run over the previous
    // layer's region row by row, full width (W1, W2 pixels a row), so that a tap is one offset.
    // Layer 2's epilogue for one pixel (py, px) of its region, row g + 8 h of a lane's
    // accumulators `a`: bias, activation, fp16 into s2's planes (zero outside the image).
    // (b2: this lane's two channels of each n8 tile of layer 2's bias, loaded once a tile)
    auto store2 = [&](const float* a, const float (&b2)[{{ NT2 }}][2], int h, int y0, int x0, int py, int px) {
        const int p = py * {{ W2 }} + px;
        const int gy = y0 - {{ R2 }} + py, gx = x0 - {{ R2 }} + px;
        const bool in = (unsigned)gy < {{ H }}u && (unsigned)gx < {{ W }}u;
#pragma unroll
        for (int n = 0; n < {{ NT2 }}; ++n) {
            const float r0 = a[4 * n + 2 * h] + b2[n][0], r1 = a[4 * n + 2 * h + 1] + b2[n][1];
            *(unsigned*)(s2 + n * {{ P2 * 8 }} + p * 8 + 2 * t) = in ? epilogue2(r0, r1) : 0u;
        }
    };
{% if REUSE2 %}
    // Layer 2 with A from registers, reused across taps (reuse_mmas): warp w takes column
    // segment w % SEG2 (16 / PH2 pixels) of R2 M tiles of PH2 rows of its region, one for each
    // of its warpgroup's MMAs; the warpgroups take R2ROWS tiles a warp, or one fewer where
    // that covers the region (L2_CALLS).
    auto layer2 = [&](int y0, int x0) {
        const int cs = warp % {{ SEG2 }};
        const unsigned a0 = {{ reuse_base("s1", P1, PH2) }};
        const unsigned long long bd = wgmma_desc(smem_addr(B2), 128, 256);
{% for count, firsts in L2_CALLS %}
        if ({% for w, _ in firsts %}wg == {{ w }}{{ " || " if not loop.last }}{% endfor %}) {
            constexpr int R2 = {{ count // (PH2 * (4 // SEG2)) }};
            const int r0 = ({% for w, f in firsts[:-1] %}wg == {{ w }} ? {{ f }} : {% endfor %}{{ firsts[-1][1] }}) + (q / {{ SEG2 }}) * {{ PH2 }} * R2;
            float acc[R2][{{ NT2 * 4 }}];
{{ reuse_mmas("R2", K2, C1, NT2, "acc", H1 - 1, W1, P1, PH2) }}
            float b2[{{ NT2 }}][2];
            bias_regs(b2, bias2, t);
#pragma unroll
            for (int m = 0; m < R2; ++m) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    {{ reuse_pixel(PH2) }}
                    if (py < {{ H2 }}) store2(acc[m], b2, h, y0, x0, py, px);
                }
            }
        }
{% endfor %}
        fence_proxy_async();  // s2, read by layer 3's wgmmas after the barrier
    };
{% else %}
    auto layer2 = [&](int y0, int x0) {
        for (int mt0 = wg * MB2; mt0 < {{ MT2 }}; mt0 += GROUPS * MB2) {
            float acc[MB2][{{ NT2 * 4 }}];
            int row0[MB2];
#pragma unroll
            for (int m = 0; m < MB2; ++m) row0[m] = (mt0 + m) * 64;
            wg_conv<{{ NT2 * 8 }}, MB2, {{ K2 * K2 * C1 // 16 }}, {{ C1 // 16 }}, {{ K2 }}, {{ W1 }}, {{ P1 * 16 }}>(
                acc, row0, smem_addr(s1), smem_addr(B2){% if MT2 % (MB2 * THREADS // 128) %}, min(MB2, {{ MT2 }} - mt0){% endif %});
            wgmma_wait<0>();
            float b2[{{ NT2 }}][2];
            bias_regs(b2, bias2, t);
#pragma unroll
            for (int m = 0; m < MB2; ++m) {
                if (mt0 + m >= {{ MT2 }}) continue;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = (mt0 + m) * 64 + q * 16 + g + 8 * h;
                    const int py = r / {{ W1 }}, px = r % {{ W1 }};
                    if (py < {{ H2 }} && px < {{ W2 }}) store2(acc[m], b2, h, y0, x0, py, px);
                }
            }
        }
        fence_proxy_async();  // s2, read by layer 3's wgmmas after the barrier
    };
{% endif %}
    // Layer 3 on warpgroups 0 to L3G - 1 ({{ L3G }}), MB3 m64 tiles each, issued and stored while
    // the other warpgroups compute layer 1 of the next tile; then they take their share of it.
    // (A warpgroup waits at a wgmma's issue until the tensor cores take it: layer 3 issued by
    // every warpgroup before its layer 1 held all of them for as long as it ran.) The last
    // tile's layer 3, alone in its phase, runs on every warpgroup.
{% else %}
    auto layer2 = [&](int y0, int x0) {
            // -- layer 2: s1 -> s2 (while the next tile's input is on its way) -----------------------
            {
                const unsigned s1a = smem_addr(s1);
                for (int mt0 = warp * MB2; mt0 < {{ MT2 }}; mt0 += WARPS * MB2) {
                    float acc[MB2][{{ NT2 }}][4];
                    unsigned rowa[MB2];
    #pragma unroll
                    for (int m = 0; m < MB2; ++m) {
                        int p = (mt0 + m) * 16 + (lane & 15);
                        p = p < {{ M2 }} ? p : {{ M2 - 1 }};
                        rowa[m] = s1a + 2u * (((p / {{ W2 }}) * {{ W1 }} + p % {{ W2 }}) * {{ S1 }} + (lane >> 4) * 8);
    #pragma unroll
                        for (int n = 0; n < {{ NT2 }}; ++n)
                            acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
                    }
    #pragma unroll {{ TAP_UNROLL }}
                    for (int tap = 0; tap < {{ K2 * K2 }}; ++tap) {
                        const unsigned toff = 2u * ((tap / {{ K2 }}) * {{ W1 }} + tap % {{ K2 }}) * {{ S1 }};
    #pragma unroll
                        for (int cc = 0; cc < {{ C1 // 16 }}; ++cc) {
                            unsigned a[MB2][4];
    #pragma unroll
                            for (int m = 0; m < MB2; ++m) ldmatrix_x4(a[m], rowa[m] + toff + cc * 32);
                            const int kc = tap * {{ C1 // 16 }} + cc;
    #pragma unroll
                            for (int n = 0; n < {{ NT2 // 2 }}; ++n) {
                                const uint4 b = B2[(kc * {{ NT2 // 2 }} + n) * 32 + lane];
    #pragma unroll
                                for (int m = 0; m < MB2; ++m) {
                                    mma16816(acc[m][2 * n], a[m], b.x, b.y);
                                    mma16816(acc[m][2 * n + 1], a[m], b.z, b.w);
                                }
                            }
                        }
                    }
                    float bz[{{ NT2 }}][2];
                    bias_regs(bz, bias2, t);
    #pragma unroll
                    for (int m = 0; m < MB2; ++m) {
    #pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int p = (mt0 + m) * 16 + g + 8 * h;
                            if (mt0 + m >= {{ MT2 }} || p >= {{ M2 }}) continue;
                            const int py = p / {{ W2 }}, px = p % {{ W2 }};
                            const int gy = y0 - {{ R2 }} + py, gx = x0 - {{ R2 }} + px;
                            const bool in = (unsigned)gy < {{ H }}u && (unsigned)gx < {{ W }}u;
    #pragma unroll
                            for (int n = 0; n < {{ NT2 }}; ++n) {
                                const int ch = n * 8 + 2 * t;
                                const float r0 = acc[m][n][2 * h] + bz[n][0], r1 = acc[m][n][2 * h + 1] + bz[n][1];
                                *(unsigned*)(s2 + p * {{ S2 }} + ch) = in ? epilogue2(r0, r1) : 0u;
                            }
                        }
                    }
                }
            }

    };
    auto layer3 = [&](int img, int y0, int x0) {
            // -- layer 3: s2 -> global (through DepthToSpace) ----------------------------------------
            {
                const unsigned s2a = smem_addr(s2);
                {{ yt }}* yo = y + (size_t)img * {{ C3 * H * W }};
                for (int mt0 = warp * MB3; mt0 < {{ MT3 }}; mt0 += WARPS * MB3) {
                    float acc[MB3][{{ NT3 }}][4];
                    unsigned rowa[MB3];
    #pragma unroll
                    for (int m = 0; m < MB3; ++m) {
                        int p = (mt0 + m) * 16 + (lane & 15);
                        p = p < {{ M3 }} ? p : {{ M3 - 1 }};
                        rowa[m] = s2a + 2u * (((p / {{ TW }}) * {{ W2 }} + p % {{ TW }}) * {{ S2 }} + (lane >> 4) * 8);
    #pragma unroll
                        for (int n = 0; n < {{ NT3 }}; ++n)
                            acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
                    }
    #pragma unroll {{ TAP_UNROLL }}
                    for (int tap = 0; tap < {{ K3 * K3 }}; ++tap) {
                        const unsigned toff = 2u * ((tap / {{ K3 }}) * {{ W2 }} + tap % {{ K3 }}) * {{ S2 }};
    #pragma unroll
                        for (int cc = 0; cc < {{ C2 // 16 }}; ++cc) {
                            unsigned a[MB3][4];
    #pragma unroll
                            for (int m = 0; m < MB3; ++m) ldmatrix_x4(a[m], rowa[m] + toff + cc * 32);
                            const int kc = tap * {{ C2 // 16 }} + cc;
    #pragma unroll
                            for (int n = 0; n < {{ NT3 // 2 }}; ++n) {
                                const uint4 b = B3[(kc * {{ NT3 // 2 }} + n) * 32 + lane];
    #pragma unroll
                                for (int m = 0; m < MB3; ++m) {
                                    mma16816(acc[m][2 * n], a[m], b.x, b.y);
                                    mma16816(acc[m][2 * n + 1], a[m], b.z, b.w);
                                }
                            }
                        }
                    }
                    float bz[{{ NT3 }}][2];
                    bias_regs(bz, bias3, t);
    #pragma unroll
                    for (int m = 0; m < MB3; ++m) {
    #pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int p = (mt0 + m) * 16 + g + 8 * h;
                            if (mt0 + m >= {{ MT3 }} || p >= {{ M3 }}) continue;
                            const int gy = y0 + p / {{ TW }}, gx = x0 + p % {{ TW }};
                            if (gy >= {{ H }} || gx >= {{ W }}) continue;
{{ store3("acc[m][n][2 * h + e] + bz[n][e]") }}
                        }
                    }
                }
            }
    };

{% endif %}
    // Software pipeline over this block's tiles, two barriers per tile:
    //   [layer 2 of t, input of t+1 -> shared] | [layer 3 of t and layer 1 of t+1]
    // Layer 3 reads s2 and layer 1 reads the input and writes s1, so they share a phase.
    int tile = blockIdx.x;
    if (tile < {{ TILES }}) {
        __syncthreads();  // the weights and the first input tile are in shared memory
{% if WGMMA %}
        layer1(((tile / {{ TX }}) % {{ TY }}) * {{ TH }}, (tile % {{ TX }}) * {{ TW }}, {{ by_wg(L1_EVEN) }}, {{ by_wg(L1_EVEN, 1) }});
{% else %}
        layer1(((tile / {{ TX }}) % {{ TY }}) * {{ TH }}, (tile % {{ TX }}) * {{ TW }}, 0, 0);
{% endif %}
        cp_async_wait_all();  // the weights of layers 2 and 3 (cp.async, above)
{% if WGMMA %}
        fence_proxy_async();  // layer 1's outputs and those weights, read by wgmma
{% endif %}
    }
    for (; tile < {{ TILES }}; tile += gridDim.x) {
        const int img = tile / {{ TY * TX }};
        const int y0 = ((tile / {{ TX }}) % {{ TY }}) * {{ TH }}, x0 = (tile % {{ TX }}) * {{ TW }};
        const int next = tile + (int)gridDim.x;
        const bool more = next < {{ TILES }};
        __syncthreads();  // s1 holds layer 1 of this tile; layer 3 of the last one is done
        if (more) fetch(next);
        layer2(y0, x0);
        if (more) commit();  // layer 1 of this tile, the input's only reader, is done
        __syncthreads();  // s2 holds layer 2; the next input is in shared memory; s1 is free
{% if WGMMA %}
        if (more) {
{{ layer3_calls(L3_CALLS) -}}
                layer1(((next / {{ TX }}) % {{ TY }}) * {{ TH }}, (next % {{ TX }}) * {{ TW }}, {{ by_wg(L1_SPLIT) }}, {{ by_wg(L1_SPLIT, 1) }});
            fence_proxy_async();  // s1, read by layer 2's wgmmas after the barrier
            } else {
{{ layer3_calls(L3_LAST_CALLS) -}}
            }
{% else %}
        layer3(img, y0, x0);
        if (more) layer1(((next / {{ TX }}) % {{ TY }}) * {{ TH }}, (next % {{ TX }}) * {{ TW }}, 0, 0);
{% endif %}
    }
}
