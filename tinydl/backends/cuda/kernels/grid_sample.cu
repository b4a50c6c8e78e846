// {{ label }}: {{ N }}x{{ C }} images of {{ H }}x{{ W }} sampled at a {{ OH }}x{{ OW }} grid each
// ({{ mode }}, {{ padding }} padding{{ ", corners aligned" if align }}), as ONNX's reference:
// the coordinate mapped from [-1, 1], then clamped or reflected where it is outside, then each
// tap outside read as zero, clamped or reflected again.

// Reflected at lo and hi until inside them.
__device__ __forceinline__ float reflect_(float v, float lo, float hi) {
    const float span = hi - lo;
    if (span <= 0.0f) return lo;
    if (v < lo) {
        const float dx = lo - v;
        const float n = floorf(dx / span);
        const float r = dx - n * span;
        return fmodf(n, 2.0f) == 0.0f ? lo + r : hi - r;
    }
    if (v > hi) {
        const float dx = v - hi;
        const float n = floorf(dx / span);
        const float r = dx - n * span;
        return fmodf(n, 2.0f) == 0.0f ? hi - r : lo + r;
    }
    return v;
}

// The coordinate along an axis of `size` pixels for grid value `v`, before its taps.
__device__ __forceinline__ float coord_(float v, float size) {
{% if align %}
    float c = (v + 1.0f) * 0.5f * (size - 1.0f);
    const float lo = 0.0f, hi = size - 1.0f;
{% else %}
    float c = ((v + 1.0f) * size - 1.0f) * 0.5f;
    const float lo = -0.5f, hi = size - 0.5f;
{% endif %}
{% if mode == "nearest" %}
    c = rintf(c);  // (ties to even)
{% endif %}
    if (c < lo || c > hi) {
{% if padding == "border" %}
        c = fminf(fmaxf(c, 0.0f), size - 1.0f);
{% elif padding == "reflection" %}
        c = reflect_(c, lo, hi);
{% endif %}
    }
    return c;
}

// Pixel (yi, xi) of the image at x, a tap outside read as the padding says.
__device__ __forceinline__ float tap_(const {{ x_ctype }}* __restrict__ x, int yi, int xi) {
{% if padding == "zeros" %}
    if (xi < 0 || yi < 0 || xi >= {{ W }} || yi >= {{ H }}) return 0.0f;
    const int cx = xi, cy = yi;
{% elif padding == "border" %}
    const int cx = min(max(xi, 0), {{ W - 1 }});
    const int cy = min(max(yi, 0), {{ H - 1 }});
{% else %}
{% if align %}
    const int cx = min(max((int)truncf(reflect_((float)xi, 0.0f, {{ W - 1 }}.0f)), 0), {{ W - 1 }});
    const int cy = min(max((int)truncf(reflect_((float)yi, 0.0f, {{ H - 1 }}.0f)), 0), {{ H - 1 }});
{% else %}
    const int cx = min(max((int)truncf(reflect_((float)xi, -0.5f, {{ W }}.0f - 0.5f)), 0), {{ W - 1 }});
    const int cy = min(max((int)truncf(reflect_((float)yi, -0.5f, {{ H }}.0f - 0.5f)), 0), {{ H - 1 }});
{% endif %}
{% endif %}
    return {{ x_load("x[cy * %d + cx]" % W) }};
}
{% if mode == "cubic" %}

// Keys' cubic convolution weight (a = -0.75) of the tap at distance d (|d| < 2).
__device__ __forceinline__ float cubic_(float d) {
    const float a = -0.75f;
    d = fabsf(d);
    if (d <= 1.0f) return ((a + 2.0f) * d - (a + 3.0f)) * d * d + 1.0f;
    return ((a * d - 5.0f * a) * d + 8.0f * a) * d - 4.0f * a;
}
{% endif %}

extern "C" __global__ void k(
    const {{ x_ctype }}* __restrict__ x,
    const {{ g_ctype }}* __restrict__ g,
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ TOTAL }}ull) return;
    const unsigned long long ox = i % {{ OW }}u;
    const unsigned long long oy = (i / {{ OW }}u) % {{ OH }}u;
    const unsigned long long nc = i / {{ OW * OH }}ull;  // n * C + c
    const unsigned long long n = nc / {{ C }}u;
    const unsigned long long gi = ((n * {{ OH }}u + oy) * {{ OW }}u + ox) * 2u;
    const float cx = coord_({{ g_load("g[gi]") }}, {{ W }}.0f);
    const float cy = coord_({{ g_load("g[gi + 1]") }}, {{ H }}.0f);
    const {{ x_ctype }}* __restrict__ img = x + nc * {{ H * W }}ull;
{% if mode == "nearest" %}
    const float r = tap_(img, (int)cy, (int)cx);
{% elif mode == "linear" %}
    const float x0 = floorf(cx), y0 = floorf(cy);
    const float fx = cx - x0, fy = cy - y0;
    const int xi = (int)x0, yi = (int)y0;
    const float top = (1.0f - fx) * tap_(img, yi, xi) + fx * tap_(img, yi, xi + 1);
    const float bottom = (1.0f - fx) * tap_(img, yi + 1, xi) + fx * tap_(img, yi + 1, xi + 1);
    const float r = (1.0f - fy) * top + fy * bottom;
{% else %}
    const float x0 = floorf(cx), y0 = floorf(cy);
    const float tx = cx - x0, ty = cy - y0;
    const int xi = (int)x0, yi = (int)y0;
    float r = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float row = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) row += cubic_(tx - (float)(j - 1)) * tap_(img, yi + k - 1, xi + j - 1);
        r += cubic_(ty - (float)(k - 1)) * row;
    }
{% endif %}
    y[i] = {{ store }};
}
