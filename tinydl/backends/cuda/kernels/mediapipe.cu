{% if op == "tinydl.TransformTensorBilinear" %}
// {{ label }}: a thread per output element of ({{ N }}, {{ C }}, {{ OH }}, {{ OW }}): input (H {{ H }}, W {{ W }}) sampled bilinearly at
// matrix @ (p + 0.5) - 0.5 (0 outside the input, a corner past the last row or column reads 0).
__device__ __forceinline__ float read_(const {{ x_ctype }}* __restrict__ x, unsigned long long plane, int yi, int xi) {
    if (yi >= {{ H }} || xi >= {{ W }}) return 0.0f;
    return {{ x_load("x[plane + (unsigned long long)yi * %du + (unsigned)xi]" % W) }};
}

extern "C" __global__ void k(
    const {{ x_ctype }}* __restrict__ x,
    const {{ m_ctype }}* __restrict__ m,
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    const float ox = (float)(i % {{ OW }}u);
    const float oy = (float)((i / {{ OW }}u) % {{ OH }}u);
    const unsigned long long nc = i / {{ OH * OW }}u;
    const unsigned long long n = nc / {{ C }}u;
    const unsigned long long mb = {{ "0ull" if MB == 1 else "n" }} * 16u;
    const float m00 = {{ m_load("m[mb]") }};
    const float m01 = {{ m_load("m[mb + 1]") }};
    const float m10 = {{ m_load("m[mb + 4]") }};
    const float m11 = {{ m_load("m[mb + 5]") }};
    const float tx = m00 * ox + m01 * oy + ({{ m_load("m[mb + 3]") }} + 0.5f * m00 + 0.5f * m01 - 0.5f);
    const float ty = m10 * ox + m11 * oy + ({{ m_load("m[mb + 7]") }} + 0.5f * m10 + 0.5f * m11 - 0.5f);
    float v = 0.0f;
    if (tx >= 0.0f && tx <= {{ W - 1 }}.0f && ty >= 0.0f && ty <= {{ H - 1 }}.0f) {
        const float x0 = floorf(tx), y0 = floorf(ty);
        const float fx = tx - x0, fy = ty - y0;
        const int xi = (int)x0, yi = (int)y0;
        const unsigned long long plane = nc * {{ H * W }}ull;
        const float upper = (1.0f - fx) * read_(x, plane, yi, xi) + fx * read_(x, plane, yi, xi + 1);
        const float lower = (1.0f - fx) * read_(x, plane, yi + 1, xi) + fx * read_(x, plane, yi + 1, xi + 1);
        v = fy * lower + (1.0f - fy) * upper;
    }
    y[i] = {{ store("v") }};
}
{% else %}
// {{ label }}: a thread per batch entry makes its 4x4 matrix from {{ L }} landmarks (x, y, z): the bounding box of
// landmarks {{ subset }} in the frame rotated so landmarks {{ left }} -> {{ right }} lie at {{ target }} radians.
extern "C" __global__ void k(const {{ x_ctype }}* __restrict__ lm, {{ out_ctype }}* __restrict__ y)
{
    const unsigned n = blockIdx.x * {{ block }}u + threadIdx.x;
    if (n >= {{ N }}u) return;
    const unsigned long long base = (unsigned long long)n * {{ L * 3 }}u;
    const float dx = {{ x_load("lm[base + %d]" % (right * 3)) }} - {{ x_load("lm[base + %d]" % (left * 3)) }};
    const float dy = {{ x_load("lm[base + %d]" % (right * 3 + 1)) }} - {{ x_load("lm[base + %d]" % (left * 3 + 1)) }};
    const float r = {{ target }} - atan2f(dy, dx);
    const float c = cosf(r), s = sinf(r);
    float lo_x = __int_as_float(0x7f800000), lo_y = lo_x, hi_x = -lo_x, hi_y = -lo_x;
{% for k in subset %}
    {
        const float px = {{ x_load("lm[base + %d]" % (k * 3)) }};
        const float py = {{ x_load("lm[base + %d]" % (k * 3 + 1)) }};
        const float rx = c * px - s * py, ry = s * px + c * py;
        lo_x = fminf(lo_x, rx);
        hi_x = fmaxf(hi_x, rx);
        lo_y = fminf(lo_y, ry);
        hi_y = fmaxf(hi_y, ry);
    }
{% endfor %}
    const float mx = (lo_x + hi_x) / 2.0f, my = (lo_y + hi_y) / 2.0f;
    const float sx = {{ scale_x }} * (hi_x - lo_x) / {{ OW }}.0f;
    const float sy = {{ scale_y }} * (hi_y - lo_y) / {{ OH }}.0f;
    const float a00 = c * sx, a01 = s * sy, a10 = -s * sx, a11 = c * sy;
    float v[16] = {0.0f};
    v[0] = a00;
    v[1] = a01;
    v[3] = c * mx + s * my - a00 * {{ OW / 2 }}f - a01 * {{ OH / 2 }}f;
    v[4] = a10;
    v[5] = a11;
    v[7] = -s * mx + c * my - a10 * {{ OW / 2 }}f - a11 * {{ OH / 2 }}f;
    v[10] = 1.0f;
    v[15] = 1.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k) y[(unsigned long long)n * 16u + k] = {{ store("v[k]") }};
}
{% endif %}
