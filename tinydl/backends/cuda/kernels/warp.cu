// {{ label }}: {{ crops }} crops of {{ oh }}x{{ ow }} ({{ layout }}) out of {{ images }} image(s) of {{ h }}x{{ w }}x{{ c }}; output
// pixel (u, v) samples the image at (X/W, Y/W) = matrix[k] @ (u, v, 1), bilinearly ({{ border }} border).
__device__ __forceinline__ float tap(const {{ xt }}* __restrict__ x, {{ itype }} base, {{ itype }} ch, int yi, int xi)
{
{% if border == "zero" %}
    if (xi < 0 || yi < 0 || xi >= {{ w }} || yi >= {{ h }}) return 0.0f;
{% endif %}
    const {{ itype }} cx = ({{ itype }})min(max(xi, 0), {{ w - 1 }});
    const {{ itype }} cy = ({{ itype }})min(max(yi, 0), {{ h - 1 }});
{% if layout == "NCHW" %}
    return {{ xload("x[((base * " ~ c ~ "u + ch) * " ~ h ~ "u + cy) * " ~ w ~ "u + cx]") }};
{% else %}
    return {{ xload("x[((base * " ~ h ~ "u + cy) * " ~ w ~ "u + cx) * " ~ c ~ "u + ch]") }};
{% endif %}
}

// A coordinate past one pixel outside reads like one just past it; NaN (and W = 0) reads as outside.
__device__ __forceinline__ float bound(float s, float hi)
{
    return isnan(s) ? -2.0f : fminf(fmaxf(s, -2.0f), hi);
}

extern "C" __global__ void __launch_bounds__({{ block }}) k(
    const {{ xt }}* __restrict__ x,
    const {{ mt }}* __restrict__ m,
    {{ yt }}* __restrict__ y)
{
    const {{ itype }} i = ({{ itype }})blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}u) return;
{% if layout == "NCHW" %}
    const {{ itype }} u = i % {{ ow }}u;
    const {{ itype }} v = (i / {{ ow }}u) % {{ oh }}u;
    const {{ itype }} ch = (i / {{ ow * oh }}u) % {{ c }}u;
    const {{ itype }} k = i / {{ ow * oh * c }}u;
{% else %}
    const {{ itype }} ch = i % {{ c }}u;
    const {{ itype }} u = (i / {{ c }}u) % {{ ow }}u;
    const {{ itype }} v = (i / {{ c * ow }}u) % {{ oh }}u;
    const {{ itype }} k = i / {{ c * ow * oh }}u;
{% endif %}
    const {{ mt }}* r = m + k * 9u;
    const float fu = (float)u, fv = (float)v;
    const float px = {{ mload("r[0]") }} * fu + {{ mload("r[1]") }} * fv + {{ mload("r[2]") }};
    const float py = {{ mload("r[3]") }} * fu + {{ mload("r[4]") }} * fv + {{ mload("r[5]") }};
    const float pw = {{ mload("r[6]") }} * fu + {{ mload("r[7]") }} * fv + {{ mload("r[8]") }};
    const float sx = pw == 0.0f ? -2.0f : bound(px / pw, {{ w + 1 }}.0f);
    const float sy = pw == 0.0f ? -2.0f : bound(py / pw, {{ h + 1 }}.0f);
    const float x0 = floorf(sx), y0 = floorf(sy);
    const float fx = sx - x0, fy = sy - y0;
    const int xi = (int)x0, yi = (int)y0;
    const {{ itype }} base = {{ "k" if images > 1 else "0" }};
    const float top = (1.0f - fx) * tap(x, base, ch, yi, xi) + fx * tap(x, base, ch, yi, xi + 1);
    const float bottom = (1.0f - fx) * tap(x, base, ch, yi + 1, xi) + fx * tap(x, base, ch, yi + 1, xi + 1);
    const float r_ = (1.0f - fy) * top + fy * bottom;
    y[i] = {{ ystore }};
}
