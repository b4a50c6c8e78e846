// {{ label }}: transposed convolution, NCHW, as a gather: output pixel (oy, ox) sums the input
// pixels whose kernel tap lands on it. Input {{ N }}x{{ C }}x{{ IH }}x{{ IW }}, output
// {{ N }}x{{ OC }}x{{ OH }}x{{ OW }}; each thread makes one pixel x {{ OCB }} output channels
// of a group. Weights are packed [group][channel block][ci][ky][kx][{{ OCB }}].
extern "C" __global__ void __launch_bounds__({{ BLOCK }}) k(
    const {{ xt }}* __restrict__ x,
    const float* __restrict__ w,
    const float* __restrict__ chan,
    {{ yt }}* __restrict__ y)
{
    const unsigned p = blockIdx.x * {{ BLOCK }}u + threadIdx.x;
    if (p >= {{ OH * OW }}u) return;
    const int oy = p / {{ OW }}u, ox = p % {{ OW }}u;
    const unsigned gb = blockIdx.y;
    const unsigned g = gb / {{ NB }}u, ob = gb % {{ NB }}u;
    const unsigned n = blockIdx.z;
    float acc[{{ OCB }}];
#pragma unroll
    for (int o = 0; o < {{ OCB }}; ++o) acc[o] = 0.0f;
    const {{ xt }}* xg = x + ((size_t)n * {{ C }}u + g * {{ CG }}u) * {{ IH * IW }}u;
    const float* wg = w + (size_t)gb * {{ CG * KH * KW * OCB }}u;
    for (int ci = 0; ci < {{ CG }}; ++ci) {
        const {{ xt }}* xc = xg + ci * {{ IH * IW }};
        const float* wc = wg + ci * {{ KH * KW * OCB }};
#pragma unroll
        for (int ky = 0; ky < {{ KH }}; ++ky) {
            const int ty = oy + {{ PT }} - ky * {{ DH }};
            if (ty < 0 || ty % {{ SH }} != 0 || ty / {{ SH }} >= {{ IH }}) continue;
            const int iy = ty / {{ SH }};
#pragma unroll
            for (int kx = 0; kx < {{ KW }}; ++kx) {
                const int tx = ox + {{ PL }} - kx * {{ DW }};
                if (tx < 0 || tx % {{ SW }} != 0 || tx / {{ SW }} >= {{ IW }}) continue;
                const int ix = tx / {{ SW }};
                const float v = {{ xload }};
                const float* wt = wc + (ky * {{ KW }} + kx) * {{ OCB }};
#pragma unroll
                for (int o = 0; o < {{ OCB }}; ++o) acc[o] = fmaf(v, wt[o], acc[o]);
            }
        }
    }
#pragma unroll
    for (int o = 0; o < {{ OCB }}; ++o) {
        const unsigned m = ob * {{ OCB }}u + o;
        if (m >= {{ MG }}u) break;
        const unsigned oc = g * {{ MG }}u + m;
        float r = acc[o] + chan[oc];
{% include "conv_epilogue.cuh" %}
        y[(((size_t)n * {{ OC }}u + oc) * {{ OH }}u + oy) * {{ OW }}u + ox] = {{ ystore }};
    }
}
