// {{ label }}: {{ B }} x ({{ M }}x{{ K }} @ {{ K }}x{{ N }}) with few rows (a classifier's Gemm): a
// warp per output column, its lanes along K (B's contiguous axis), each lane's partial sums of
// the {{ M }} rows added across the warp; fp32 accumulation. The tiled kernel would give such a
// product a handful of blocks that walk all of K.
extern "C" __global__ void __launch_bounds__({{ THREADS }}) k(
    const {{ at }}* __restrict__ a,
    const {{ bt }}* __restrict__ b,
    const long long* __restrict__ batch,
{% if ct %}
    const {{ ct }}* __restrict__ c,
{% endif %}
    {{ yt }}* __restrict__ y)
{
    const unsigned lane = threadIdx.x % 32u;
    const unsigned n = blockIdx.x * {{ WARPS }}u + threadIdx.x / 32u;
    if (n >= {{ N }}u) return;  // a whole warp at once: the shuffles below see every lane
    const unsigned bi = blockIdx.y;
    const {{ at }}* ab = a + batch[2 * bi];
    const {{ bt }}* bb = b + batch[2 * bi + 1];
    float acc[{{ M }}];
#pragma unroll
    for (int m = 0; m < {{ M }}; ++m) acc[m] = 0.0f;
    for (unsigned k = lane; k < {{ K }}u; k += 32u) {
        const float w = {{ bload }};
#pragma unroll
        for (unsigned m = 0; m < {{ M }}u; ++m) acc[m] = fmaf({{ aload }}, w, acc[m]);
    }
#pragma unroll
    for (unsigned m = 0; m < {{ M }}u; ++m) {
        float v = acc[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0u) {
            const float r = {{ result }};
            y[((unsigned long long)bi * {{ M }}u + m) * {{ N }}ull + n] = {{ ystore }};
        }
    }
}
