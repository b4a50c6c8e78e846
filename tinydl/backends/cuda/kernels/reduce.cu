{% if GENERIC %}
// tinydl: compiled fast, to run for a while
// Generic: the counts, kept and reduced axes (size, stride) come in `g` (program.py,
// "generic_kernels"), so every such reduction over {{ kept | length }} kept and {{ reduced | length }} reduced axes shares it.
struct Ext {
    unsigned O, R;
    float RF;  // R as a float (a mean's divisor)
    unsigned kd[{{ kept | length }}], ks[{{ kept | length }}], rd[{{ reduced | length }}], rs[{{ reduced | length }}];
};
{% endif %}
// {{ label }}: {{ ("the index of the " ~ ("largest" if arg == "max" else "smallest")) if arg else "a reduction" }} over {{ R }} elements for each of {{ O }} outputs; a {{ "warp" if per_warp else "block" }}
// per output: a strided {{ acc }} pass per thread, then warp shuffles{{ "" if per_warp else " and one exchange through shared memory" }}.
{% if not GENERIC %}
// Kept axes (size, stride) {{ kept }}; reduced axes {{ reduced }}.
{% endif %}
{% if arg %}
// (a, ia) comes before (b, ib): {{ "larger" if arg == "max" else "smaller" }}, then the {{ "last" if last else "first" }} index among equals.
// NONE_ marks a thread that has seen no element yet.
#define NONE_ 0xffffffffu
__device__ __forceinline__ bool before_({{ acc }} a, unsigned ia, {{ acc }} b, unsigned ib) {
    if (ia == NONE_ || ib == NONE_) return ib == NONE_ && ia != NONE_;
    return a {{ ">" if arg == "max" else "<" }} b || (a == b && ia {{ ">" if last else "<" }} ib);
}
__device__ __forceinline__ void warp_arg_({{ acc }}& v, unsigned& i) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        const {{ acc }} w = __shfl_xor_sync(0xffffffffu, v, d);
        const unsigned j = __shfl_xor_sync(0xffffffffu, i, d);
        if (before_(w, j, v, i)) {
            v = w;
            i = j;
        }
    }
}
{% else %}
__device__ __forceinline__ {{ acc }} combine_({{ acc }} a, {{ acc }} b) { return {{ combine }}; }
__device__ __forceinline__ {{ acc }} warp_combine_({{ acc }} v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = combine_(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
{% endif %}

extern "C" __global__ void __launch_bounds__({{ block }}) k(
{% if GENERIC %}
    const Ext g,
{% endif %}
    const {{ xt }}* __restrict__ x,
    {{ yt }}* __restrict__ y)
{
    const unsigned lane = threadIdx.x & 31u;
{% if per_warp %}
    // The exit is per warp (every lane of a warp has the same o), so shuffles see full warps.
    const {{ itype }} o = ({{ itype }})blockIdx.x * {{ warps }}u + (threadIdx.x >> 5);
    if (o >= {{ OV }}) return;
    const unsigned first = lane, step = 32u;
{% else %}
    const {{ itype }} o = blockIdx.x;
    const unsigned first = threadIdx.x, step = {{ block }}u;
    __shared__ {{ acc }} part[{{ warps }}];
{% endif %}
    {{ itype }} rem = o;
    {{ itype }} base = 0;
{% for d in range(kept | length - 1, -1, -1) %}
    base += (rem % {{ kept[d][0] }}) * {{ kept[d][1] }};
    rem /= {{ kept[d][0] }};
{% endfor %}
{% macro offset() %}
        {{ itype }} q = r;
        {{ itype }} off = base;
{% for d in range(reduced | length - 1, -1, -1) %}
        off += (q % {{ reduced[d][0] }}) * {{ reduced[d][1] }};
        q /= {{ reduced[d][0] }};
{% endfor %}
{% endmacro %}
{% if arg %}
    {{ acc }} best = 0;
    unsigned bi = NONE_;
    for ({{ itype }} r = first; r < {{ RV }}; r += step) {
{{ offset() }}
        const {{ acc }} v = {{ xload }};
        if (before_(v, (unsigned)r, best, bi)) {
            best = v;
            bi = (unsigned)r;
        }
    }
    warp_arg_(best, bi);
{% if not per_warp %}
    __shared__ unsigned ipart[{{ warps }}];
    if (lane == 0) {
        part[threadIdx.x >> 5] = best;
        ipart[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    if (threadIdx.x >= 32u) return;
    best = lane < {{ warps }}u ? part[lane] : ({{ acc }})0;
    bi = lane < {{ warps }}u ? ipart[lane] : NONE_;
    warp_arg_(best, bi);
{% endif %}
    if (lane == 0) y[o] = ({{ yt }})bi;
{% else %}
{% if shift %}
    // The largest element first, so that exp never overflows (0 when it is -inf: log(0) stays).
    float m = -__int_as_float(0x7f800000);
    for ({{ itype }} r = first; r < {{ RV }}; r += step) {
{{ offset() }}
        m = fmaxf(m, {{ xload }});
    }
    m = warp_max_(m);
{% if not per_warp %}
    if (lane == 0) part[threadIdx.x >> 5] = m;
    __syncthreads();
    m = warp_max_(lane < {{ warps }}u ? part[lane] : m);
    __syncthreads();  // part is reused by the sum
{% endif %}
    if (m == -__int_as_float(0x7f800000)) m = 0.0f;
{% endif %}
    {{ acc }} s = {{ init }};
    for ({{ itype }} r = first; r < {{ RV }}; r += step) {
{{ offset() }}
        const {{ acc }} v = {{ xload }};
        s = combine_(s, {{ element }});
    }
    s = warp_combine_(s);
{% if not per_warp %}
    if (lane == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x >= 32u) return;
    s = warp_combine_(lane < {{ warps }}u ? part[lane] : {{ init }});
{% endif %}
    if (lane == 0) y[o] = {{ ystore }};
{% endif %}
}
