{% if GENERIC %}
// tinydl: compiled fast, to run for a while
{% endif %}
// {{ label }}: convolution as an implicit GEMM on {% if TF32 and X3 %}3xTF32{% elif TF32 %}tf32{% else %}fp16{% endif %} tensor cores (mma.sync {% if TF32 %}m16n8k8{% else %}m16n8k16{% endif %}, fp32
{% if GENERIC %}
// accumulation), NCHW. Generic: every extent (batch, planes, channels, window, strides, pads)
// comes in the argument `g` (a struct in the parameter bank) and divisions by them are
// multiplications by magic numbers, so one kernel serves every layer of a plan with the same
// tile and precision, {% if RT_EPI %}the activations of its epilogue coded in `g` too{% else %}and epilogue{% endif %}: what a cold start runs first while the
// layers' own kernels compile (program.py, "generic_kernels"). M = output pixels of the batch, N = output
// channels, K = taps x input channels (tap-major: ky, kx, then channels).{% if GROUPED %}
// Grouped: a tile of {{ BN }} output channels reads only the g.CT input channels of its
// groups, at blockIdx.y * g.CT; K runs over those, zero where a channel is another group's.{% endif %}
{% elif RUNTIME %}
// accumulation), NCHW, input {{ N }}x(C)x{{ IH }}x{{ IW }} ({% if TF32 %}float32{% else %}fp16{% endif %}), output
// {{ N }}x{{ OC }}x{{ OH }}x{{ OW }}. M = output pixels of the batch ({{ M }}), N = output
// channels, K = taps x input channels (tap-major: ky, kx, then channels). The channel counts
// (C, K) are the argument `g` (a struct in the parameter bank), so the layers of a plan that
// differ only in their input channels share this kernel.{% if GROUPED %}
// Grouped: the weights are block-diagonal, so a tile of {{ BN }} output channels reads only
// the g.CT input channels of its groups, at blockIdx.y * g.CT; K runs over those, zero where a
// channel is another group's.{% endif %}
{% else %}
// accumulation), NCHW, input {{ N }}x{{ C }}x{{ IH }}x{{ IW }} ({% if TF32 %}float32{% else %}fp16{% endif %}), output
// {{ N }}x{{ OC }}x{{ OH }}x{{ OW }}. M = output pixels of the batch ({{ M }}), N = output
// channels, K = taps x input channels ({{ K }}, tap-major: ky, kx, then channels).{% if GROUPED %}
// Grouped ({{ G }} groups of {{ C // G }} input channels): the weights are block-diagonal, so a
// tile of {{ BN }} output channels reads only the {{ CT }} input channels of its groups, at
// blockIdx.y * {{ CT }}; K runs over those, zero where a channel is another group's.{% endif %}
{% endif %}
// A block of {{ THREADS }} threads makes a {{ BM }}x{{ BN }} tile of the output, walking K by
// {{ BK }}: the input patch (gathered: im2col on the fly, zero outside the image) and the
{% if TF32 and X3 %}
// weights (packed [OC padded][K padded] as two tf32 parts, big + small, one after the other in
// one array, split on the GPU from the float32 weights: split_tf32.cu; the patch is split alike
// as the fragments are read: three MMAs, small x big, big x small, big x big, keep float32's
// accuracy) are staged in shared memory, rows padded by 4 floats against bank
// conflicts, and read a word a lane in the MMA's fragment order. Each warp owns a {{ WM }}x{{ WN }}
{% elif TF32 %}
// weights (packed [OC padded][K padded] on the host, rounded to tf32; the patch is rounded as
// it is staged) are staged in shared memory, rows padded by 4 floats against bank conflicts,
// and read a word a lane in the MMA's fragment order. Each warp owns a {{ WM }}x{{ WN }}
{% elif LO %}
// weights (packed [OC padded][K padded] on the host as two fp16 parts, hi + lo, so that only
// the input's fp16 storage rounds: two MMAs per tile) are staged in shared memory, rows padded
// by 8 halves against bank conflicts, and read with ldmatrix. Each warp owns a {{ WM }}x{{ WN }}
{% else %}
// weights (packed [OC padded][K padded] on the host, rounded to fp16) are staged in shared
// memory, rows padded by 8 halves against bank conflicts, and read with ldmatrix. Each warp
// owns a {{ WM }}x{{ WN }}
{% endif %}
// piece. The next K step's tiles are loaded into registers while this one is multiplied.
// {% if RT_EPI %}Where g.KS < g.KP, K is split g.KP / g.KS ways over blockIdx.z and each split adds
// its partial sums into a zeroed float32 workspace, `finish` applying the epilogue; else the
// epilogue (bias, then g's activations, residual and what follows it) is applied here.
// {% elif SPLIT > 1 %}K is split {{ "g.KP / g.KS" if GENERIC else SPLIT }} ways over blockIdx.z (too few tiles to fill the GPU):
// each split adds its partial sums into a zeroed float32 workspace, and `finish` applies the
// epilogue.{% else %}The epilogue is conv.cu's: bias (BatchNormalization folded in),
// activations, residual and what follows it.{% endif %}

#define THREADS {{ THREADS }}
#define BM {{ BM }}
#define BN {{ BN }}
#define BK {{ BK }}
{% set et = "float" if TF32 else "half_t" %}
#define LDS (BK + {{ 4 if TF32 else 8 }})
#define MT {{ WM // 16 }}
#define NT {{ WN // 8 }}
#define A_PER {{ A_PER }}
// `stmt` for every sum a thread keeps (i, j, q: its fragment indices)
#define each_sum(stmt) \
    _Pragma("unroll") for (int i = 0; i < MT; ++i) \
    _Pragma("unroll") for (int j = 0; j < NT; ++j) \
    _Pragma("unroll") for (int q = 0; q < 4; ++q) stmt
#define B_VEC ({{ BN * BK // (4 if TF32 else 8) }} / THREADS)  // uint4 loads

{% include "mma.cuh" %}

{% if GENERIC or RUNTIME %}
{% set KV, KPV, KSV = "g.K", "g.KP", "g.KS" %}
{% macro tap_of(kk, ci) %}tap = fast_div({{ kk }}, g.ct_mul, g.ct_shr), {{ ci }} = {{ kk }} - tap * g.CT{% endmacro %}
{% if GENERIC %}
// The layer's extents, set per launch; each divisor d with its magic numbers (mul, shr):
{% else %}
// The layer's channel counts, set per launch. CT's magic numbers (mul, shr) make
{% endif %}
// n / d == (umulhi(n, mul) + n) >> shr for 0 <= n < 2^31 (Granlund and Montgomery).
struct Geo {
    int C, CT, K, KP, KS;  // input channels (a grouped tile's: CT), K, K padded, K a block
    unsigned ct_mul, ct_shr;
{% if GENERIC %}
    int M, OC, OCP, IH, IW, IHW, OH, OW, HW, SH, SW, PT, PL, DH, DW, KW, MOC;
    unsigned hw_mul, hw_shr, ow_mul, ow_shr, kw_mul, kw_shr, oh_mul, oh_shr, oc_mul, oc_shr;
    // The epilogue, when it comes at launch (`RT_EPI`): activation codes (conv.py's
    // RT_CODES) with two parameters each, `pre` of them from 0, `post` (after the residual)
    // from {{ EPI_PRE }}; `slope`: whether `chan` holds a PRelu slope after the bias; `res`:
    // whether a residual is added (else `res` is not read).
    int pre, post, slope, res;
    int code[{{ EPI_PRE + EPI_POST }}];
    float pa[{{ EPI_PRE + EPI_POST }}], pb[{{ EPI_PRE + EPI_POST }}];
{% endif %}
};
__device__ __forceinline__ int fast_div(int n, unsigned mul, unsigned shr) {
    return (int)((__umulhi((unsigned)n, mul) + (unsigned)n) >> shr);
}
{% if RT_EPI %}
{% include "act_at.cuh" %}
{% endif %}

{% else %}
{% set KV, KPV, KSV = K, KP, KP // SPLIT %}
{% macro tap_of(kk, ci) %}tap = {{ kk }} / {{ CT }}, {{ ci }} = {{ kk }} % {{ CT }}{% endmacro %}
{% endif %}
{% macro finish_one() %}
{% if RT_EPI %}
            const float slope = g.slope ? chan[(unsigned)g.OC + oc] : 0.0f;
#pragma unroll
            for (int e = 0; e < {{ EPI_PRE }}; ++e)
                if (e < g.pre) r = act_at(g.code[e], r, g.pa[e], g.pb[e], slope);
            if (g.res) {
                r += {{ rload }};
#pragma unroll
                for (int e = {{ EPI_PRE }}; e < {{ EPI_PRE + EPI_POST }}; ++e)
                    if (e < {{ EPI_PRE }} + g.post) r = act_at(g.code[e], r, g.pa[e], g.pb[e], slope);
            }
{% else %}
{% include "conv_epilogue.cuh" %}
{% endif %}
{% if GENERIC %}
            y[(((size_t)n * g.OC + oc) * g.OH + oy) * g.OW + ox] = {{ ystore }};
{% else %}
            y[(((size_t)n * {{ OC }}u + oc) * {{ OH }}u + oy) * {{ OW }}u + ox] = {{ ystore }};
{% endif %}
{% endmacro %}

{% if ENTRY == "zero" %}
// (Each entry is rendered as a source of its own: the compile cache keys kernels by source.)
extern "C" __global__ void zero({% if GENERIC %}const Geo g, {% endif %}float* __restrict__ ws) {
    const unsigned i = blockIdx.x * 256u + threadIdx.x;
    if (i < {% if GENERIC %}(unsigned)g.MOC{% else %}{{ M * OC }}u{% endif %}) ws[i] = 0.0f;
}
{% elif ENTRY == "finish" %}
// The epilogue over the workspace: one thread per output element, in output order.
extern "C" __global__ void finish(
{% if GENERIC %}
    const Geo g,
{% endif %}
    const float* __restrict__ ws,
    const float* __restrict__ chan,
{% if residual %}
    const {{ rt }}* __restrict__ res,
{% endif %}
    {{ yt }}* __restrict__ y)
{
    const unsigned i = blockIdx.x * 256u + threadIdx.x;
{% if GENERIC %}
    if (i >= (unsigned)g.MOC) return;
    const int q1 = fast_div((int)i, g.ow_mul, g.ow_shr), q2 = fast_div(q1, g.oh_mul, g.oh_shr);
    const unsigned nq = fast_div(q2, g.oc_mul, g.oc_shr);
    const unsigned ox = i - q1 * g.OW, oy = q1 - q2 * g.OH, oc = q2 - nq * g.OC, n = nq;
    const unsigned m = (n * g.OH + oy) * g.OW + ox;
    float r = ws[(size_t)m * g.OC + oc] + chan[oc];
{% else %}
    if (i >= {{ M * OC }}u) return;
    const unsigned ox = i % {{ OW }}u, oy = (i / {{ OW }}u) % {{ OH }}u;
    const unsigned oc = (i / {{ OH * OW }}u) % {{ OC }}u, n = i / {{ OC * OH * OW }}u;
    const unsigned m = (n * {{ OH }}u + oy) * {{ OW }}u + ox;
    float r = ws[(size_t)m * {{ OC }}u + oc] + chan[oc];
{% endif %}
{{ finish_one() }}
}
{% else %}
extern "C" __global__ void __launch_bounds__(THREADS) k(
{% if RUNTIME or GENERIC %}
    const Geo g,
{% endif %}
    const {{ et }}* __restrict__ x,
    const {{ et }}* __restrict__ w,
{% if LO and not X3 %}
    const {{ et }}* __restrict__ wl,
{% endif %}
{% if RT_EPI %}
    float* __restrict__ ws,  // (read where g.KS < g.KP; chan, res and y where not)
{% endif %}
{% if SPLIT > 1 and not RT_EPI %}
    float* __restrict__ ws)
{% else %}
    const float* __restrict__ chan,
{% if residual %}
    const {{ rt }}* __restrict__ res,
{% endif %}
    {{ yt }}* __restrict__ y)
{% endif %}
{
    __shared__ __align__(16) {{ et }} As[BM][LDS];
    __shared__ __align__(16) {{ et }} Bs[BN][LDS];
{% if LO %}
    __shared__ __align__(16) {{ et }} Bl[BN][LDS];
{% endif %}
{% if X3 %}
    const float* __restrict__ wl = w + (size_t){{ "g.OCP" if GENERIC else OCP }} * {{ KPV }};  // the small parts
{% endif %}
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wm = (warp % {{ BM // WM }}) * {{ WM }}, wn = (warp / {{ BM // WM }}) * {{ WN }};

    // This thread gathers pixel am of the A tile, k columns ak0 .. ak0 + A_PER - 1.
    const int am = tid % BM, ak0 = (tid / BM) * A_PER;
    const int pm = m0 + am;
{% if GENERIC %}
    const bool pin = pm < g.M;
    const int pn = pin ? fast_div(pm, g.hw_mul, g.hw_shr) : 0, pp = pin ? pm - pn * g.HW : 0;
    const int py = fast_div(pp, g.ow_mul, g.ow_shr);
    const int iy0 = py * g.SH - g.PT, ix0 = (pp - py * g.OW) * g.SW - g.PL;
    const {{ et }}* xn = x + (size_t)pn * g.C * g.IHW{% if GROUPED %} + (size_t)blockIdx.y * g.CT * g.IHW{% endif %};
{% set IHV, IWV, IHWV = "g.IH", "g.IW", "g.IHW" %}
{% else %}
{% set IHV, IWV, IHWV = IH, IW, IH * IW %}
    const bool pin = pm < {{ M }};
    const int pn = pin ? pm / {{ OH * OW }} : 0, pp = pin ? pm % {{ OH * OW }} : 0;
    const int iy0 = (pp / {{ OW }}) * {{ SH }} - {{ PT }}, ix0 = (pp % {{ OW }}) * {{ SW }} - {{ PL }};
{% endif %}
{% if GENERIC %}
{% elif RUNTIME %}
    const {{ et }}* xn = x + (size_t)pn * g.C * {{ IH * IW }}{% if GROUPED %} + (size_t)blockIdx.y * g.CT * {{ IH * IW }}{% endif %};
{% else %}
    const {{ et }}* xn = x + (size_t)pn * {{ C * IH * IW }}{% if GROUPED %} + (size_t)blockIdx.y * {{ CT * IH * IW }}{% endif %};
{% endif %}

    {{ et }} areg[A_PER];
    uint4 breg[B_VEC]{% if LO %}, lreg[B_VEC]{% endif %};
    constexpr int VEC = {{ 4 if TF32 else 8 }};  // elements per uint4
    auto load_tiles = [&](int k0) {
{% if GENERIC %}
        // The thread's A_PER columns in order: the tap and channel of the first found once,
        // then stepped (channel, then kx, then ky). Not unrolled (nor the MMA steps below):
        // the generic kernel is made to compile fast (0.15-0.2 s against 0.3-0.6 unrolled).
        {
            int kk = k0 + ak0, {{ tap_of("kk", "ci") }};
            int ty = fast_div(tap, g.kw_mul, g.kw_shr), tx = tap - ty * g.KW;
#pragma unroll 1
            for (int j = 0; j < A_PER; ++j, ++kk) {
                const int iy = iy0 + ty * g.DH, ix = ix0 + tx * g.DW;
                {{ et }} v = 0;
                if (pin && kk < g.K && (unsigned)iy < (unsigned)g.IH && (unsigned)ix < (unsigned)g.IW)
                    v = xn[((size_t)ci * g.IH + iy) * g.IW + ix];
                areg[j] = v;
                if (++ci == g.CT) {
                    ci = 0;
                    if (++tx == g.KW) tx = 0, ++ty;
                }
            }
        }
{% elif WHOLE_TAPS %}
        // K is tap-major (ky, kx, then channels) and a thread's A_PER columns are channels of
        // one tap: its position is worked out once, then A_PER loads a plane apart.
        {
            const int kk = k0 + ak0, {{ tap_of("kk", "ci0") }};
{% if GENERIC %}
            const int ty = fast_div(tap, g.kw_mul, g.kw_shr);
            const int iy = iy0 + ty * g.DH, ix = ix0 + (tap - ty * g.KW) * g.DW;
            const bool ok = pin && kk < g.K && (unsigned)iy < (unsigned)g.IH && (unsigned)ix < (unsigned)g.IW;
{% else %}
            const int iy = iy0 + (tap / {{ KW }}) * {{ DH }}, ix = ix0 + (tap % {{ KW }}) * {{ DW }};
            const bool ok = pin && kk < {{ KV }} && (unsigned)iy < {{ IH }}u && (unsigned)ix < {{ IW }}u;
{% endif %}
            const {{ et }}* xp = xn + ((size_t)ci0 * {{ IHV }} + (ok ? iy : 0)) * {{ IWV }} + (ok ? ix : 0);
#pragma unroll
            for (int j = 0; j < A_PER; ++j) areg[j] = ok ? xp[(size_t)j * {{ IHWV }}] : ({{ et }})0;
        }
{% else %}
#pragma unroll
        for (int j = 0; j < A_PER; ++j) {
            const int kk = k0 + ak0 + j;
            {{ et }} v = 0;
            if (pin && kk < {{ KV }}) {
                const int {{ tap_of("kk", "ci") }};
{% if GENERIC %}
                const int ty = fast_div(tap, g.kw_mul, g.kw_shr);
                const int iy = iy0 + ty * g.DH, ix = ix0 + (tap - ty * g.KW) * g.DW;
                if ((unsigned)iy < (unsigned)g.IH && (unsigned)ix < (unsigned)g.IW)
                    v = xn[((size_t)ci * g.IH + iy) * g.IW + ix];
{% else %}
                const int iy = iy0 + (tap / {{ KW }}) * {{ DH }}, ix = ix0 + (tap % {{ KW }}) * {{ DW }};
                if ((unsigned)iy < {{ IH }}u && (unsigned)ix < {{ IW }}u)
                    v = xn[((size_t)ci * {{ IH }} + iy) * {{ IW }} + ix];
{% endif %}
            }
            areg[j] = v;
        }
{% endif %}
#pragma unroll
        for (int j = 0; j < B_VEC; ++j) {
            const int e = tid + j * THREADS;  // uint4 index within the BN x BK tile
            const int row = e / (BK / VEC), col = (e % (BK / VEC)) * VEC;
            breg[j] = *(const uint4*)(w + (size_t)(n0 + row) * {{ KPV }} + k0 + col);
{% if LO %}
            lreg[j] = *(const uint4*)(wl + (size_t)(n0 + row) * {{ KPV }} + k0 + col);
{% endif %}
        }
    };
    auto store_tiles = [&]() {
#pragma unroll
        for (int j = 0; j < A_PER; ++j) As[am][ak0 + j] = {% if TF32 and not X3 %}to_tf32(areg[j]){% else %}areg[j]{% endif %};
#pragma unroll
        for (int j = 0; j < B_VEC; ++j) {
            const int e = tid + j * THREADS;
            const int row = e / (BK / VEC), col = (e % (BK / VEC)) * VEC;
            *(uint4*)&Bs[row][col] = breg[j];
{% if LO %}
            *(uint4*)&Bl[row][col] = lreg[j];
{% endif %}
        }
    };

    float acc[MT][NT][4];
    each_sum(acc[i][j][q] = 0.0f);

    // This block's share of K: {{ KSV }} of it per split.
    const int kbeg = blockIdx.z * {{ KSV }}, kend = kbeg + {{ KSV }};
    load_tiles(kbeg);
    for (int k0 = kbeg; k0 < kend; k0 += BK) {
        __syncthreads();
        store_tiles();
        __syncthreads();
        if (k0 + BK < kend) load_tiles(k0 + BK);  // the next step's, during this one's math
{% if X3 %}
        // This K step's sums start from zero and are added to the running ones after it:
        // the tensor cores' own additions (not rounded to nearest) then err by a step's
        // magnitude, not the whole sum's.
        float part[MT][NT][4];
        each_sum(part[i][j][q] = 0.0f);
{% endif %}
{% if TF32 %}
        // Fragments a word a lane: A's rows g and g + 8, columns t and t + 4 (g = lane / 4,
        // t = lane % 4), B's row (channel) g, columns t and t + 4; rows 36 words apart, so the
        // 32 lanes hit 32 banks.
#pragma unroll{{ " 1" if GENERIC }}
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned a[MT][4]{% if X3 %}, as[MT][4]{% endif %};
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float* p = &As[wm + i * 16 + (lane >> 2)][kk + (lane & 3)];
{% if X3 %}
                const float v[4] = {p[0], p[8 * LDS], p[4], p[8 * LDS + 4]};
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float big = to_tf32(v[q]);
                    a[i][q] = __float_as_uint(big);
                    as[i][q] = __float_as_uint(to_tf32(v[q] - big));
                }
{% else %}
                a[i][0] = __float_as_uint(p[0]);
                a[i][1] = __float_as_uint(p[8 * LDS]);
                a[i][2] = __float_as_uint(p[4]);
                a[i][3] = __float_as_uint(p[8 * LDS + 4]);
{% endif %}
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const float* q = &Bs[wn + j * 8 + (lane >> 2)][kk + (lane & 3)];
                const unsigned b0 = __float_as_uint(q[0]), b1 = __float_as_uint(q[4]);
{% if X3 %}
                const float* ql = &Bl[wn + j * 8 + (lane >> 2)][kk + (lane & 3)];
                const unsigned l0 = __float_as_uint(ql[0]), l1 = __float_as_uint(ql[4]);
#pragma unroll
                for (int i = 0; i < MT; ++i) {  // the small products first
                    mma1688_tf32(part[i][j], as[i], b0, b1);
                    mma1688_tf32(part[i][j], a[i], l0, l1);
                    mma1688_tf32(part[i][j], a[i], b0, b1);
                }
{% else %}
#pragma unroll
                for (int i = 0; i < MT; ++i) mma1688_tf32(acc[i][j], a[i], b0, b1);
{% endif %}
            }
        }
{% if X3 %}
        each_sum(acc[i][j][q] += part[i][j][q]);
{% endif %}
{% else %}
#pragma unroll{{ " 1" if GENERIC }}
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldmatrix_x4(a[i], smem_addr(&As[wm + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]));
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned b[4], l[4];
                const int brow = wn + j * 8 + (lane & 7) + ((lane >> 4) << 3);
                const int bcol = kk + ((lane >> 3) & 1) * 8;
                ldmatrix_x4(b, smem_addr(&Bs[brow][bcol]));
{% if LO %}
                ldmatrix_x4(l, smem_addr(&Bl[brow][bcol]));
{% endif %}
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma16816(acc[i][j], a[i], b[0], b[1]);
                    mma16816(acc[i][j + 1], a[i], b[2], b[3]);
{% if LO %}
                    mma16816(acc[i][j], a[i], l[0], l[1]);
                    mma16816(acc[i][j + 1], a[i], l[2], l[3]);
{% endif %}
                }
            }
        }
{% endif %}
    }

    // acc[i][j]: rows (pixels) wm + i*16 + lane/4 (+8 for q >= 2), columns (channels)
    // wn + j*8 + 2*(lane%4) (+1 for odd q).
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int q2 = 0; q2 < 2; ++q2) {
        const int m = m0 + wm + i * 16 + (lane >> 2) + q2 * 8;
{% if GENERIC %}
        if (m >= g.M) continue;
        const int nq = fast_div(m, g.hw_mul, g.hw_shr), p = m - nq * g.HW;
        const int oq = fast_div(p, g.ow_mul, g.ow_shr);
        const unsigned n = nq, oy = oq, ox = p - oq * g.OW;
{% else %}
        if (m >= {{ M }}) continue;
        const unsigned n = m / {{ OH * OW }}, p = m % {{ OH * OW }};
        const unsigned oy = p / {{ OW }}, ox = p % {{ OW }};
{% endif %}
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q1 = 0; q1 < 2; ++q1) {
            const unsigned oc = n0 + wn + j * 8 + 2 * (lane & 3) + q1;
            if (oc >= {{ "(unsigned)g.OC" if GENERIC else OC ~ "u" }}) continue;
{% if RT_EPI %}
            if (g.KS < g.KP) {
                atomicAdd(ws + (size_t)m * g.OC + oc, acc[i][j][q2 * 2 + q1]);
                continue;
            }
            float r = acc[i][j][q2 * 2 + q1] + chan[oc];
{{ finish_one() }}
{% elif SPLIT > 1 %}
            atomicAdd(ws + (size_t)m * {{ "g.OC" if GENERIC else OC ~ "u" }} + oc, acc[i][j][q2 * 2 + q1]);
{% else %}
            float r = acc[i][j][q2 * 2 + q1] + chan[oc];
{{ finish_one() }}
{% endif %}
        }
    }
}
{% endif %}
