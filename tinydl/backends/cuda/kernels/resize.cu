// {{ label }}: resize {{ dims_in }} -> {{ dims_out }}; per output axis, a table row gives
// {{ taps_per_axis }} taps (input offset{{ ", weight" if weighted else "" }}) and an outside flag; the output sums the products
// over all axes (extrapolation value where any axis is outside the crop).
extern "C" __global__ void __launch_bounds__({{ block }}) k(
    const {{ xt }}* __restrict__ x,
    const long long* __restrict__ ti,
{% if weighted %}
    const float* __restrict__ tw,
{% endif %}
    {{ yt }}* __restrict__ y)
{
    const {{ itype }} i = ({{ itype }})blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}u) return;
    {{ itype }} rem = i;
    bool outside = false;
{% for d in range(rank - 1, -1, -1) %}
    const unsigned e{{ d }} = {{ base[d] }}u + (unsigned)(rem % {{ dims_out[d] }}u) * {{ taps_per_axis[d] + 1 }}u;
    rem /= {{ dims_out[d] }}u;
    outside = outside || ti[e{{ d }} + {{ taps_per_axis[d] }}u] != 0;
{% endfor %}
{% if copy %}
    const long long at = {% for d in range(rank) %}ti[e{{ d }}]{{ " + " if not loop.last }}{% endfor %};
    y[i] = outside ? {{ yextrapolation }} : x[at];
{% else %}
{% if weighted %}
    float acc = 0.0f;
{% for combo in combos %}
    {
        const long long at = {% for d in range(rank) %}ti[e{{ d }} + {{ combo[d] }}u]{{ " + " if not loop.last }}{% endfor %};
        acc += {{ xload }}{% for d in range(rank) if taps_per_axis[d] > 1 %} * tw[e{{ d }} + {{ combo[d] }}u]{% endfor %};
    }
{% endfor %}
    const {{ ct }} r = outside ? {{ extrapolation }} : acc;
{% else %}
    const long long at = {% for d in range(rank) %}ti[e{{ d }}]{{ " + " if not loop.last }}{% endfor %};
    const {{ ct }} r = outside ? {{ extrapolation }} : ({{ ct }})({{ xload }});
{% endif %}
    y[i] = {{ ystore }};
{% endif %}
}
