{#- The signature of both kernels: A, B, the per-batch offsets of A and B, C (Gemm), Y. -#}
{% set signature %}
extern "C" __global__ void __launch_bounds__({{ THREADS }}) k(
    const {{ at }}* __restrict__ a,
    const {{ bt }}* __restrict__ b,
    const long long* __restrict__ batch,
{% if ct %}
    const {{ ct }}* __restrict__ c,
{% endif %}
    {{ yt }}* __restrict__ y)
{% endset %}
{% if gemv %}
// {{ label }}: {{ B }} x ({{ M }}x{{ K }} @ {{ K }}x{{ N }}) with few rows (a classifier's Gemm): {{ SPLIT }}
// warp(s) per output column, {{ COLS }} column(s) a block, the lanes along K (B's contiguous axis,
// the warps of a column interleaved along it), each lane's partial sums of the {{ M }} rows added
// across its warp, then across the column's warps in shared memory; fp32 accumulation. The
// tiled kernel would give such a product a handful of blocks that walk all of K; splitting K
// over warps keeps enough loads in flight to hide their latency.
{{ signature }}{
    __shared__ float sums[{{ WARPS }}][{{ M }}];
    const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;
    const unsigned col = warp / {{ SPLIT }}u, part = warp % {{ SPLIT }}u;
    const unsigned n = blockIdx.x * {{ COLS }}u + col;
    const unsigned bi = blockIdx.y;
    const {{ at }}* ab = a + batch[2 * bi];
    const {{ bt }}* bb = b + batch[2 * bi + 1];
    float acc[{{ M }}];
#pragma unroll
    for (int m = 0; m < {{ M }}; ++m) acc[m] = 0.0f;
    if (n < {{ N }}u) {
#pragma unroll 4
        for (unsigned k = part * 32u + lane; k < {{ K }}u; k += {{ 32 * SPLIT }}u) {
            const float w = {{ bload }};
#pragma unroll
            for (unsigned m = 0; m < {{ M }}u; ++m) acc[m] = fmaf({{ aload }}, w, acc[m]);
        }
    }
#pragma unroll
    for (unsigned m = 0; m < {{ M }}u; ++m) {
        float v = acc[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0u) sums[warp][m] = v;
    }
    __syncthreads();
    if (part == 0u && n < {{ N }}u && lane < {{ M }}u) {
        const unsigned m = lane;
        float v = 0.0f;
#pragma unroll
        for (unsigned p = 0; p < {{ SPLIT }}u; ++p) v += sums[warp + p][m];
        const float r = {{ result }};
        y[((unsigned long long)bi * {{ M }}u + m) * {{ N }}ull + n] = {{ ystore }};
    }
}
{% else %}
// {{ label }}: {{ B }} x ({{ M }}x{{ K }} @ {{ K }}x{{ N }}), tiled: a block of 16x16 threads makes a
// {{ TILE }}x{{ TILE }} tile of the output, each thread 4x4 (rows ty + 16i, columns tx + 16j), through
// {{ DEPTH }}-deep slices of A and B in shared memory; fp32 accumulation.
// A strides (m, k) = ({{ SAM }}, {{ SAK }}), B strides (k, n) = ({{ SBK }}, {{ SBN }}).
{{ signature }}{
    // +1 column: threads storing along k hit distinct banks.
    __shared__ float As[{{ DEPTH }}][{{ TILE }} + 1];  // [k][m]
    __shared__ float Bs[{{ DEPTH }}][{{ TILE }} + 1];  // [k][n]
    const unsigned t = threadIdx.x, tx = t % 16u, ty = t / 16u;
    const unsigned bi = blockIdx.z;
    const {{ at }}* ab = a + batch[2 * bi];
    const {{ bt }}* bb = b + batch[2 * bi + 1];
    const unsigned m0 = blockIdx.y * {{ TILE }}u, n0 = blockIdx.x * {{ TILE }}u;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    // No thread leaves before the loop ends: every thread reaches every __syncthreads.
    for (unsigned k0 = 0; k0 < {{ K }}u; k0 += {{ DEPTH }}u) {
#pragma unroll
        for (int r = 0; r < {{ TILE * DEPTH // THREADS }}; ++r) {
            const unsigned e = t + r * {{ THREADS }}u;
{% if a_k_fast %}
            const unsigned kk = e % {{ DEPTH }}u, mm = e / {{ DEPTH }}u;
{% else %}
            const unsigned mm = e % {{ TILE }}u, kk = e / {{ TILE }}u;
{% endif %}
            const unsigned m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < {{ M }}u && k < {{ K }}u) ? {{ aload }} : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < {{ TILE * DEPTH // THREADS }}; ++r) {
            const unsigned e = t + r * {{ THREADS }}u;
{% if b_n_fast %}
            const unsigned nn = e % {{ TILE }}u, kk = e / {{ TILE }}u;
{% else %}
            const unsigned kk = e % {{ DEPTH }}u, nn = e / {{ DEPTH }}u;
{% endif %}
            const unsigned n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < {{ N }}u && k < {{ K }}u) ? {{ bload }} : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < {{ DEPTH }}; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const unsigned m = m0 + ty + 16u * i;
        if (m >= {{ M }}u) break;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned n = n0 + tx + 16u * j;
            if (n >= {{ N }}u) break;
            const float r = {{ result }};
            y[((unsigned long long)bi * {{ M }}u + m) * {{ N }}ull + n] = {{ ystore }};
        }
    }
}
{% endif %}
