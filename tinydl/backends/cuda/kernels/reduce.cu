// {{ label }}: mean over {{ R }} elements for each of {{ O }} outputs; a {{ "warp" if per_warp else "block" }} per
// output: strided fp32 sums per thread, then warp shuffles{{ "" if per_warp else " and one exchange through shared memory" }}.
// Kept axes (size, stride) {{ kept }}; reduced axes {{ reduced }}.
__device__ __forceinline__ float warp_sum_(float v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

extern "C" __global__ void __launch_bounds__({{ block }}) k(
    const {{ xt }}* __restrict__ x,
    {{ yt }}* __restrict__ y)
{
    const unsigned lane = threadIdx.x & 31u;
{% if per_warp %}
    // The exit is per warp (every lane of a warp has the same o), so shuffles see full warps.
    const {{ itype }} o = ({{ itype }})blockIdx.x * {{ warps }}u + (threadIdx.x >> 5);
    if (o >= {{ O }}u) return;
    const unsigned first = lane, step = 32u;
{% else %}
    const {{ itype }} o = blockIdx.x;
    const unsigned first = threadIdx.x, step = {{ block }}u;
{% endif %}
    {{ itype }} rem = o;
    {{ itype }} base = 0;
{% for d in range(kept | length - 1, -1, -1) %}
    base += (rem % {{ kept[d][0] }}u) * {{ kept[d][1] }}u;
    rem /= {{ kept[d][0] }}u;
{% endfor %}
    float s = 0.0f;
    for ({{ itype }} r = first; r < {{ R }}u; r += step) {
        {{ itype }} q = r;
        {{ itype }} off = base;
{% for d in range(reduced | length - 1, -1, -1) %}
        off += (q % {{ reduced[d][0] }}u) * {{ reduced[d][1] }}u;
        q /= {{ reduced[d][0] }}u;
{% endfor %}
        s += {{ xload }};
    }
    s = warp_sum_(s);
{% if not per_warp %}
    __shared__ float part[{{ warps }}];
    if (lane == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x >= 32u) return;
    s = warp_sum_(lane < {{ warps }}u ? part[lane] : 0.0f);
{% endif %}
    if (lane == 0) y[o] = {{ ystore }};
}
