{% if GENERIC %}
// tinydl: compiled fast, to run for a while
// {{ label }}: direct convolution, NCHW, generic: every extent comes in `e` (a struct in the
// parameter bank), and the epilogue's activations and residual too, so every layer of a plan
// with these types and {{ OCB }} output channel(s) a thread shares this kernel (program.py,
// "generic_kernels"). One output pixel a thread; weights packed as conv.cu's.
struct Ext {
    unsigned total, ohw, ow, oh, nb, c, cg, ihw, ih, iw, wg, kh, kw, sh, sw, dh, dw, mg, oc;
    int pt, pl;
    int pre, post, slope, res;  // as conv_tc.cu's
    int code[{{ EPI_PRE + EPI_POST }}];
    float pa[{{ EPI_PRE + EPI_POST }}], pb[{{ EPI_PRE + EPI_POST }}];
};
{% include "act_at.cuh" %}
extern "C" __global__ void __launch_bounds__({{ BLOCK }}) k(
    const Ext e,
    const {{ xt }}* __restrict__ x,
    const float* __restrict__ w,
    const float* __restrict__ chan,
    const {{ rt }}* __restrict__ res,
    {{ yt }}* __restrict__ y)
{
    const unsigned idx = blockIdx.x * {{ BLOCK }}u + threadIdx.x;
    if (idx >= e.total) return;
    const unsigned p = idx % e.ohw, oy = p / e.ow, ox = p % e.ow;
    const unsigned gb = idx / e.ohw;  // group * NB + channel block
    const unsigned g = gb / e.nb, ob = gb % e.nb;
    const unsigned n = blockIdx.z;
    float acc[{{ OCB }}];
#pragma unroll
    for (int o = 0; o < {{ OCB }}; ++o) acc[o] = 0.0f;
    const {{ xt }}* xg = x + ((size_t)n * e.c + g * e.cg) * e.ihw;
    const float* wg = w + (size_t)gb * e.wg;
    const int iy0 = (int)(oy * e.sh) - e.pt, ix0 = (int)(ox * e.sw) - e.pl;
    const float* wt = wg;
#pragma unroll 1
    for (unsigned ci = 0; ci < e.cg; ++ci) {
        const {{ xt }}* xc = xg + ci * e.ihw;
#pragma unroll 1
        for (unsigned ky = 0; ky < e.kh; ++ky) {
            const int iy = iy0 + (int)(ky * e.dh);
            const bool row = (unsigned)iy < e.ih;
#pragma unroll 1
            for (unsigned kx = 0; kx < e.kw; ++kx, wt += {{ OCB }}) {
                const int ix = ix0 + (int)(kx * e.dw);
                const float v = (row && (unsigned)ix < e.iw) ? {{ xload }} : 0.0f;
#pragma unroll
                for (int o = 0; o < {{ OCB }}; ++o) acc[o] = fmaf(v, __ldg(wt + o), acc[o]);
            }
        }
    }
#pragma unroll
    for (int o = 0; o < {{ OCB }}; ++o) {
        const unsigned m = ob * {{ OCB }}u + o;   // channel within the group
        if (m >= e.mg) break;
        const unsigned oc = g * e.mg + m;
        float r = acc[o] + chan[oc];
        const float slope = e.slope ? chan[e.oc + oc] : 0.0f;
#pragma unroll
        for (int s = 0; s < {{ EPI_PRE }}; ++s)
            if (s < e.pre) r = act_at(e.code[s], r, e.pa[s], e.pb[s], slope);
        const size_t at = (((size_t)n * e.oc + oc) * e.oh + oy) * e.ow + ox;
        if (e.res) {
            r += {{ rload }};
#pragma unroll
            for (int s = {{ EPI_PRE }}; s < {{ EPI_PRE + EPI_POST }}; ++s)
                if (s < {{ EPI_PRE }} + e.post) r = act_at(e.code[s], r, e.pa[s], e.pb[s], slope);
        }
        y[at] = {{ ystore }};
    }
}
{% else %}
// {{ label }}: direct convolution, NCHW, input {{ N }}x{{ C }}x{{ IH }}x{{ IW }}, output
// {{ N }}x{{ OC }}x{{ OH }}x{{ OW }}, {{ G }} group(s). Each thread makes {{ PX }} adjacent output
// pixels of a row x {{ OCB }} output channels of a group, accumulating in fp32; weights are
// packed [group][channel block][ci][ky][kx][{{ OCB }}] so one tap's weights are adjacent (and
// read as float4 when {{ OCB }} is a multiple of 4).
extern "C" __global__ void __launch_bounds__({{ BLOCK }}) k(
    const {{ xt }}* __restrict__ x,
    const float* __restrict__ w,
    const float* __restrict__ chan,
{% if residual %}
    const {{ rt }}* __restrict__ res,
{% endif %}
    {{ yt }}* __restrict__ y)
{
    // One thread per (channel block, pixel group): the pixels of a row are adjacent, so a
    // warp mostly shares one channel block (its weights) and reads adjacent inputs.
    const unsigned idx = blockIdx.x * {{ BLOCK }}u + threadIdx.x;
    if (idx >= {{ G * NB * OH * OWG }}u) return;
    const unsigned p = idx % {{ OH * OWG }}u;
    const unsigned oy = p / {{ OWG }}u, ox0 = (p % {{ OWG }}u) * {{ PX }}u;
    const unsigned gb = idx / {{ OH * OWG }}u;  // group * NB + channel block
    const unsigned g = gb / {{ NB }}u, ob = gb % {{ NB }}u;
    const unsigned n = blockIdx.z;
    float acc[{{ PX }}][{{ OCB }}];
#pragma unroll
    for (int q = 0; q < {{ PX }}; ++q)
#pragma unroll
        for (int o = 0; o < {{ OCB }}; ++o) acc[q][o] = 0.0f;
    const {{ xt }}* xg = x + ((size_t)n * {{ C }}u + g * {{ CG }}u) * {{ IH * IW }}u;
    const float* wg = w + (size_t)gb * {{ CG * KH * KW * OCB }}u;
    const int iy0 = (int)(oy * {{ SH }}u) - {{ PT }}, ix0 = (int)(ox0 * {{ SW }}u) - {{ PL }};
    for (int ci = 0; ci < {{ CG }}; ++ci) {
        const {{ xt }}* xc = xg + ci * {{ IH * IW }};
        const float* wc = wg + ci * {{ KH * KW * OCB }};
#pragma unroll
        for (int ky = 0; ky < {{ KH }}; ++ky) {
            const int iy = iy0 + ky * {{ DH }};
            const bool row = (unsigned)iy < {{ IH }}u;
#pragma unroll
            for (int kx = 0; kx < {{ KW }}; ++kx) {
                float v[{{ PX }}];
#pragma unroll
                for (int q = 0; q < {{ PX }}; ++q) {
                    const int ix = ix0 + q * {{ SW }} + kx * {{ DW }};
                    v[q] = (row && (unsigned)ix < {{ IW }}u) ? {{ xload }} : 0.0f;
                }
                const float* wt = wc + (ky * {{ KW }} + kx) * {{ OCB }};
{% if OCB % 4 == 0 %}
#pragma unroll
                for (int o4 = 0; o4 < {{ OCB // 4 }}; ++o4) {
                    const float4 w4 = __ldg((const float4*)wt + o4);
#pragma unroll
                    for (int q = 0; q < {{ PX }}; ++q) {
                        acc[q][4 * o4 + 0] = fmaf(v[q], w4.x, acc[q][4 * o4 + 0]);
                        acc[q][4 * o4 + 1] = fmaf(v[q], w4.y, acc[q][4 * o4 + 1]);
                        acc[q][4 * o4 + 2] = fmaf(v[q], w4.z, acc[q][4 * o4 + 2]);
                        acc[q][4 * o4 + 3] = fmaf(v[q], w4.w, acc[q][4 * o4 + 3]);
                    }
                }
{% else %}
#pragma unroll
                for (int o = 0; o < {{ OCB }}; ++o) {
                    const float wv = __ldg(wt + o);
#pragma unroll
                    for (int q = 0; q < {{ PX }}; ++q) acc[q][o] = fmaf(v[q], wv, acc[q][o]);
                }
{% endif %}
            }
        }
    }
#pragma unroll
    for (int q = 0; q < {{ PX }}; ++q) {
    const unsigned ox = ox0 + q;
    if (ox >= {{ OW }}u) break;
#pragma unroll
    for (int o = 0; o < {{ OCB }}; ++o) {
        const unsigned m = ob * {{ OCB }}u + o;   // channel within the group
        if (m >= {{ MG }}u) break;
        const unsigned oc = g * {{ MG }}u + m;
        float r = acc[q][o] + chan[oc];
{% include "conv_epilogue.cuh" %}
{% if d2s %}
        // Stored through DepthToSpace (blocksize {{ BS }}, {{ "DCR" if dcr else "CRD" }}).
{% if dcr %}
        const unsigned c_ = oc % {{ OC // (BS * BS) }}u, ij = oc / {{ OC // (BS * BS) }}u;
{% else %}
        const unsigned c_ = oc / {{ BS * BS }}u, ij = oc % {{ BS * BS }}u;
{% endif %}
        const unsigned yy = oy * {{ BS }}u + ij / {{ BS }}u, xx = ox * {{ BS }}u + ij % {{ BS }}u;
        y[(((size_t)n * {{ OC // (BS * BS) }}u + c_) * {{ OH * BS }}u + yy) * {{ OW * BS }}u + xx] = {{ ystore }};
{% else %}
        y[(((size_t)n * {{ OC }}u + oc) * {{ OH }}u + oy) * {{ OW }}u + ox] = {{ ystore }};
{% endif %}
    }
    }
}
{% endif %}
