{% if transpose %}
// {{ label }}: 3-D transposed convolution, NCDHW, as a gather: output value (oz, oy, ox) sums
// the input values whose kernel tap lands on it; weights [c][oc % MG][kz][ky][kx].
{% else %}
// {{ label }}: 3-D convolution, NCDHW; weights [oc][ci][kz][ky][kx].
{% endif %}
// Input {{ N }}x{{ C }}x{{ ID }}x{{ IH }}x{{ IW }}, output {{ N }}x{{ OC }}x{{ OD }}x{{ OH }}x{{ OW }},
// {{ CG }} input and {{ MG }} output channels a group, kernel {{ KD }}x{{ KH }}x{{ KW }}.
// One output value a thread (consecutive threads: consecutive output columns), the taps in
// loops (a video network's few 3-D layers; not tuned).
{% if transpose %}
// The input index along an axis that tap k of an output at o reads: (o + pad - k * dilation)
// / stride where that is a whole step inside the input, else -1.
__device__ __forceinline__ int src_(int o, int k, int pad, int dil, int stride, int size) {
    const int t = o + pad - k * dil;
    return (t < 0 || t % stride != 0 || t / stride >= size) ? -1 : t / stride;
}
{% endif %}
extern "C" __global__ void __launch_bounds__({{ BLOCK }}) k(
    const {{ xt }}* __restrict__ x,
    const float* __restrict__ w,
    const float* __restrict__ chan,
{% if residual %}
    const {{ rt }}* __restrict__ res,
{% endif %}
    {{ yt }}* __restrict__ y)
{
    const size_t i = (size_t)blockIdx.x * {{ BLOCK }}u + threadIdx.x;
    if (i >= {{ TOTAL }}ull) return;
    size_t t = i;
    const int ox = (int)(t % {{ OW }}u);
    t /= {{ OW }}u;
    const int oy = (int)(t % {{ OH }}u);
    t /= {{ OH }}u;
    const int oz = (int)(t % {{ OD }}u);
    t /= {{ OD }}u;
    const unsigned oc = (unsigned)(t % {{ OC }}u);
    const size_t n = t / {{ OC }}u;
    const unsigned g = oc / {{ MG }}u;
{% if not transpose %}
    const int iz0 = oz * {{ SD }} - {{ PF }}, iy0 = oy * {{ SH }} - {{ PT }}, ix0 = ox * {{ SW }} - {{ PL }};
{% endif %}
    float acc = 0.0f;
    for (int ci = 0; ci < {{ CG }}; ++ci) {
        const {{ xt }}* xc = x + ((n * {{ C }}u + g * {{ CG }}u + ci) * {{ ID * IH * IW }}ull);
{% if transpose %}
        const float* wc = w + ((size_t)(g * {{ CG }}u + ci) * {{ MG }}u + oc % {{ MG }}u) * {{ KD * KH * KW }}u;
{% else %}
        const float* wc = w + ((size_t)oc * {{ CG }}u + ci) * {{ KD * KH * KW }}u;
{% endif %}
        for (int kz = 0; kz < {{ KD }}; ++kz) {
            const int iz = {% if transpose %}src_(oz, kz, {{ PF }}, {{ DD }}, {{ SD }}, {{ ID }}){% else %}iz0 + kz * {{ DD }}{% endif %};
            if ((unsigned)iz >= {{ ID }}u) continue;
#pragma unroll
            for (int ky = 0; ky < {{ KH }}; ++ky) {
                const int iy = {% if transpose %}src_(oy, ky, {{ PT }}, {{ DH }}, {{ SH }}, {{ IH }}){% else %}iy0 + ky * {{ DH }}{% endif %};
                if ((unsigned)iy >= {{ IH }}u) continue;
                const {{ xt }}* xr = xc + (iz * {{ IH }} + iy) * {{ IW }};
                const float* wr = wc + (kz * {{ KH }} + ky) * {{ KW }};
#pragma unroll
                for (int kx = 0; kx < {{ KW }}; ++kx) {
                    const int ix = {% if transpose %}src_(ox, kx, {{ PL }}, {{ DW }}, {{ SW }}, {{ IW }}){% else %}ix0 + kx * {{ DW }}{% endif %};
                    if ((unsigned)ix < {{ IW }}u) acc = fmaf({{ xload }}, __ldg(wr + kx), acc);
                }
            }
        }
    }
    float r = acc + chan[oc];
{% include "conv_epilogue.cuh" %}
    y[i] = {{ ystore }};
}
