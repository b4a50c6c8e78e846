// {{ label }}: {{ total }} outputs, a thread per (roi, channel, bin row, bin column) of ({{ R }}, {{ C }}, {{ OH }}, {{ OW }}): the {{ mode }}
// of a grid of bilinear samples of its bin ({{ "%d per axis" % ratio if ratio > 0 else "ceil(roi size / bins) per axis" }}), as tinydl/ops/detection.py.
struct Sample_ {
    unsigned lo, hi;
    float w_lo, w_hi;
};

// Sample at v of an axis of `length`: its two taps and weights (both 0 outside [-1, length]).
__device__ __forceinline__ Sample_ sample_(float v0, unsigned length) {
    Sample_ s;
    const bool inside = v0 >= -1.0f && v0 <= (float)length;
    const float v = fmaxf(v0, 0.0f);
    unsigned lo = (unsigned)floorf(v);
    float frac = v - floorf(v);
    unsigned hi = lo + 1u;
    if (lo >= length - 1u) {
        lo = length - 1u;
        hi = lo;
        frac = 0.0f;
    }
    s.lo = lo;
    s.hi = hi;
    s.w_lo = inside ? 1.0f - frac : 0.0f;
    s.w_hi = inside ? frac : 0.0f;
    return s;
}

extern "C" __global__ void k(
    const {{ x_ctype }}* __restrict__ x,
    const {{ roi_ctype }}* __restrict__ rois,
    const {{ idx_ctype }}* __restrict__ bidx,
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    const unsigned pw = (unsigned)(i % {{ OW }}u);
    const unsigned ph = (unsigned)((i / {{ OW }}u) % {{ OH }}u);
    const unsigned long long c = (i / {{ OW * OH }}u) % {{ C }}u;
    const unsigned long long r = i / {{ OW * OH * C }}ull;
    const float x0 = {{ roi_load("rois[r * 4]") }} * {{ scale }} - {{ offset }};
    const float y0 = {{ roi_load("rois[r * 4 + 1]") }} * {{ scale }} - {{ offset }};
    float roi_w = {{ roi_load("rois[r * 4 + 2]") }} * {{ scale }} - {{ offset }} - x0;
    float roi_h = {{ roi_load("rois[r * 4 + 3]") }} * {{ scale }} - {{ offset }} - y0;
{% if not half %}
    roi_w = fmaxf(roi_w, 1.0f);
    roi_h = fmaxf(roi_h, 1.0f);
{% endif %}
{% if ratio > 0 %}
    const unsigned gy = {{ ratio }}u, gx = {{ ratio }}u;
{% else %}
    const unsigned gy = (unsigned)fmaxf(ceilf(roi_h / {{ OH }}.0f), 0.0f);
    const unsigned gx = (unsigned)fmaxf(ceilf(roi_w / {{ OW }}.0f), 0.0f);
{% endif %}
    const float step_h = roi_h / {{ OH }}.0f;
    const float step_w = roi_w / {{ OW }}.0f;
    long long bi = (long long)bidx[r];
    bi = bi < 0 ? 0 : (bi > {{ N - 1 }} ? {{ N - 1 }} : bi);
    const unsigned long long plane = ((unsigned long long)bi * {{ C }}u + c) * {{ H * W }}ull;
{% if mode == "avg" %}
    float acc = 0.0f;
{% else %}
    float acc = -__int_as_float(0x7f800000);
{% endif %}
    for (unsigned iy = 0; iy < gy; ++iy) {
        const Sample_ sy = sample_(y0 + (float)ph * step_h + ((float)iy + 0.5f) * step_h / (float)gy, {{ H }}u);
        for (unsigned ix = 0; ix < gx; ++ix) {
            const Sample_ sx = sample_(x0 + (float)pw * step_w + ((float)ix + 0.5f) * step_w / (float)gx, {{ W }}u);
            const float a = {{ x_load("x[plane + sy.lo * %du + sx.lo]" % W) }} * (sy.w_lo * sx.w_lo);
            const float b = {{ x_load("x[plane + sy.lo * %du + sx.hi]" % W) }} * (sy.w_lo * sx.w_hi);
            const float d = {{ x_load("x[plane + sy.hi * %du + sx.lo]" % W) }} * (sy.w_hi * sx.w_lo);
            const float e = {{ x_load("x[plane + sy.hi * %du + sx.hi]" % W) }} * (sy.w_hi * sx.w_hi);
{% if mode == "avg" %}
            acc += a + b + d + e;
{% else %}
            acc = fmaxf(acc, fmaxf(fmaxf(a, b), fmaxf(d, e)));
{% endif %}
        }
    }
{% if mode == "avg" %}
    const float v = acc / (float)(gy * gx > 0u ? gy * gx : 1u);
{% else %}
    const float v = gy * gx == 0u ? 0.0f : acc;
{% endif %}
    y[i] = {{ store }};
}
