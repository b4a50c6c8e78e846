// {{ label }}: 3-D convolution, NCDHW. Input {{ N }}x{{ C }}x{{ ID }}x{{ IH }}x{{ IW }}, output
// {{ N }}x{{ OC }}x{{ OD }}x{{ OH }}x{{ OW }}, {{ CG }} input channels a group, kernel {{ KD }}x{{ KH }}x{{ KW }}.
// One output value a thread (consecutive threads: consecutive output columns), the taps in
// loops, weights [oc][ci][kz][ky][kx] (a video network's few 3-D layers; not tuned).
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
    const int iz0 = oz * {{ SD }} - {{ PF }}, iy0 = oy * {{ SH }} - {{ PT }}, ix0 = ox * {{ SW }} - {{ PL }};
    float acc = 0.0f;
    for (int ci = 0; ci < {{ CG }}; ++ci) {
        const {{ xt }}* xc = x + ((n * {{ C }}u + g * {{ CG }}u + ci) * {{ ID * IH * IW }}ull);
        const float* wc = w + ((size_t)oc * {{ CG }}u + ci) * {{ KD * KH * KW }}u;
        for (int kz = 0; kz < {{ KD }}; ++kz) {
            const int iz = iz0 + kz * {{ DD }};
            if ((unsigned)iz >= {{ ID }}u) continue;
#pragma unroll
            for (int ky = 0; ky < {{ KH }}; ++ky) {
                const int iy = iy0 + ky * {{ DH }};
                if ((unsigned)iy >= {{ IH }}u) continue;
                const {{ xt }}* xr = xc + (iz * {{ IH }} + iy) * {{ IW }};
                const float* wr = wc + (kz * {{ KH }} + ky) * {{ KW }};
#pragma unroll
                for (int kx = 0; kx < {{ KW }}; ++kx) {
                    const int ix = ix0 + kx * {{ DW }};
                    if ((unsigned)ix < {{ IW }}u) acc = fmaf({{ xload }}, __ldg(wr + kx), acc);
                }
            }
        }
    }
    float r = acc + chan[oc];
{% include "conv_epilogue.cuh" %}
    y[i] = {{ ystore }};
}
