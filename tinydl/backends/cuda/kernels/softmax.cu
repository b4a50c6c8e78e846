// {{ label }}: {{ "log-softmax" if log else "softmax" }} over {{ L }} elements (stride {{ inner }}) for each of {{ rows }} rows; a
// {{ "warp" if per_warp else "block of %d threads" % T }} per row, {{ vpt }} element(s) per thread{{ " kept in registers" if cached else "" }}:
// the row's max, the sum of exponentials, then the normalized write.

extern "C" __global__ void __launch_bounds__({{ 32 * warps }}) k(
    const {{ xt }}* __restrict__ x,
    {{ yt }}* __restrict__ y)
{
{% if per_warp %}
    // The exit is per warp (all lanes share the row), so shuffles see full warps.
    const {{ itype }} row = ({{ itype }})blockIdx.x * {{ warps }}u + (threadIdx.x >> 5);
    if (row >= {{ rows }}u) return;
    const unsigned t = threadIdx.x & 31u;
{% else %}
    __shared__ float part[{{ warps }}];
    const {{ itype }} row = blockIdx.x;
    const unsigned t = threadIdx.x;
{% endif %}
    const unsigned long long base =
        (unsigned long long)(row / {{ inner }}u) * {{ L * inner }}ull + row % {{ inner }}u;
    float m = NEG_INF_;
{% if cached %}
    float v[{{ vpt }}];
#pragma unroll
    for (int j = 0; j < {{ vpt }}; ++j) {
        const unsigned k = t + j * {{ T }}u;
        v[j] = k < {{ L }}u ? {{ xload }} : NEG_INF_;
        m = fmaxf(m, v[j]);
    }
{% else %}
    for (unsigned k = t; k < {{ L }}u; k += {{ T }}u) m = fmaxf(m, {{ xload }});
{% endif %}
    m = {{ "warp_max_(m)" if per_warp else "block_max_(m, part)" }};
    float s = 0.0f;
{% if cached %}
#pragma unroll
    for (int j = 0; j < {{ vpt }}; ++j) {
        v[j] = t + j * {{ T }}u < {{ L }}u ? expf(v[j] - m) : 0.0f;
        s += v[j];
    }
{% else %}
    for (unsigned k = t; k < {{ L }}u; k += {{ T }}u) s += expf({{ xload }} - m);
{% endif %}
    s = {{ "warp_sum_(s)" if per_warp else "block_sum_(s, part)" }};
{% if log %}
    const float ls = logf(s);
    for (unsigned k = t; k < {{ L }}u; k += {{ T }}u) {
        const float xv = {{ xload }};
        y[base + (unsigned long long)k * {{ inner }}ull] = {{ logstore }};
    }
{% else %}
    const float inv = 1.0f / s;
{% if cached %}
#pragma unroll
    for (int j = 0; j < {{ vpt }}; ++j) {
        const unsigned k = t + j * {{ T }}u;
        if (k < {{ L }}u) {
            const float e = v[j];
            y[base + (unsigned long long)k * {{ inner }}ull] = {{ ystore }};
        }
    }
{% else %}
    for (unsigned k = t; k < {{ L }}u; k += {{ T }}u) {
        const float e = expf({{ xload }} - m);
        y[base + (unsigned long long)k * {{ inner }}ull] = {{ ystore }};
    }
{% endif %}
{% endif %}
}
