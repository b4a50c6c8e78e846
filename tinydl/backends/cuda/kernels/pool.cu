// {{ label }}: {{ "max" if is_max else "average" }} pooling, one output per thread; input
// {{ dims_in }}, output {{ dims_out }}, kernel {{ kernel }}, stride {{ strides }},
// dilation {{ dilations }}, pads {{ pads }} / {{ pads_end }}.
extern "C" __global__ void __launch_bounds__({{ block }}) k(
    const {{ xt }}* __restrict__ x,
    {{ yt }}* __restrict__ y)
{
    const {{ itype }} i = ({{ itype }})blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}u) return;
    {{ itype }} rem = i;
{% for d in range(nd - 1, -1, -1) %}
    const int o{{ d }} = (int)(rem % {{ dims_out[d] }}u);
    rem /= {{ dims_out[d] }}u;
{% endfor %}
    const {{ xt }}* xp = x + (unsigned long long)rem * {{ plane }}ull;  // this (n, c) plane
{% if is_max %}
    {{ ct }} acc = {{ lowest }};
{% else %}
    float acc = 0.0f;
    int count = 0;
{% endif %}
{% for d in range(nd) %}
#pragma unroll
    for (int k{{ d }} = 0; k{{ d }} < {{ kernel[d] }}; ++k{{ d }}) {
        const int i{{ d }} = o{{ d }} * {{ strides[d] }} + k{{ d }} * {{ dilations[d] }} - {{ pads[d] }};
        const bool in{{ d }} = {{ "in%d && " % (d - 1) if d > 0 else "" }}(unsigned)i{{ d }} < {{ dims_in[d] }}u;
{% if include_pad %}
        const bool pad{{ d }} = {{ "pad%d && " % (d - 1) if d > 0 else "" }}i{{ d }} >= {{ -pads[d] }} && i{{ d }} < {{ dims_in[d] + pads_end[d] }};
{% endif %}
{% endfor %}
        if (in{{ nd - 1 }}) {
            const unsigned off = {% for d in range(nd) %}(unsigned)i{{ d }} * {{ in_strides[d] }}u{{ " + " if not loop.last }}{% endfor %};
            const {{ ct }} v = {{ xload }};
{% if is_max %}
{% if ct == "float" %}
            acc = fmaxf(acc, v);
{% else %}
            acc = v > acc ? v : acc;
{% endif %}
{% else %}
            acc += v;
            ++count;
{% if include_pad %}
        } else if (pad{{ nd - 1 }}) {
            ++count;  // an explicit pad counts as a zero (count_include_pad)
{% endif %}
{% endif %}
        }
{% for d in range(nd) %}
    }
{% endfor %}
{% if is_max %}
    const {{ ct }} r = acc;
{% else %}
    const float r = acc / (float)count;
{% endif %}
    y[i] = {{ ystore }};
}
