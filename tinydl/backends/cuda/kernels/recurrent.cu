// {{ label }} ({{ op }}, {{ phase }}): {{ total_threads }} threads, one per (direction, batch entry, hidden unit); sequence
// {{ T }}, batch {{ B }}, input {{ I }}, hidden {{ H }}, layout {{ layout }}. See backends/recurrent.py.
{% for d in range(ND) %}{% for k in range(acts[d] | length) %}
__device__ __forceinline__ float act_{{ d }}_{{ k }}(float x) {
    const float a = {{ acts[d][k][1] }};
    const float b = {{ acts[d][k][2] }};
    (void)a;
    (void)b;
    return {{ acts[d][k][0] }};
}
{% endfor %}{% endfor %}
__device__ __forceinline__ float clipped_(float x) {
    return {{ "fminf(fmaxf(x, -%s), %s)" % (clip, clip) if clip else "x" }};
}

extern "C" __global__ void k(
{% for name, type, access in decls %}
    {{ "const " if access == "read" }}{{ type }}* __restrict__ {{ name }},
{% endfor %}
    const int step)
{
    const unsigned i = blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total_threads }}u) return;
    const unsigned j = i % {{ H }}u;
    const unsigned bb = (i / {{ H }}u) % {{ B }}u;
    const unsigned d = i / {{ B * H }}u;
    const unsigned unit = (d * {{ B }}u + bb) * {{ H }}u + j;
{% set state_at = "(bb * %du + d) * %du + j" % (ND, H) if layout else "unit" %}
{% if phase == "init" %}
    hs[unit] = {{ load("init_h", "init_h[" ~ state_at ~ "]") if has_init[0] else "0.0f" }};
{% if op == "LSTM" %}
    cs[unit] = {{ load("init_c", "init_c[" ~ state_at ~ "]") if has_init[1] else "0.0f" }};
{% endif %}
{% elif phase == "final" %}
{% if yh %}
    y_h[{{ state_at }}] = {{ store("y_h", "hs[%du + unit]" % ((T % 2) * ND * B * H)) }};
{% endif %}
{% if yc %}
    y_c[{{ state_at }}] = {{ store("y_c", "cs[unit]") }};
{% endif %}
{% else %}
    const unsigned s = (unsigned)step;
    const unsigned len = {{ "(unsigned)lens[bb]" if has_lens else T ~ "u" }};
    const bool live = s < len;
    const bool rev = {{ "d == 1u" if directions == [False, True] else ("true" if directions[0] else "false") }};
    const unsigned pos = (rev && live) ? len - 1u - s : s;
    const unsigned cur = (s % 2u) * {{ ND * B * H }}u;
    const unsigned nxt = {{ ND * B * H }}u - cur;
    const unsigned hrow = cur + (d * {{ B }}u + bb) * {{ H }}u;
    const float h_prev = hs[cur + unit];
    const unsigned xrow = {{ "(bb * %du + pos) * %du" % (T, I) if layout else "(pos * %du + bb) * %du" % (B, I) }};
    // The input and recurrent products of this unit's gates, with their biases.
    float ax[{{ G }}];
    float ah[{{ G }}];
#pragma unroll
    for (unsigned g = 0; g < {{ G }}u; ++g) {
        const unsigned row = (d * {{ G }}u + g) * {{ H }}u + j;
        float sx = wt[{{ off_b }}u + d * {{ 2 * G * H }}u + g * {{ H }}u + j];
        for (unsigned k = 0; k < {{ I }}u; ++k) {
            sx += {{ load("x", "x[xrow + k]") }} * wt[{{ off_w }}u + row * {{ I }}u + k];
        }
        float sh = wt[{{ off_b + G * H }}u + d * {{ 2 * G * H }}u + g * {{ H }}u + j];
{% if op == "GRU" and not lbr %}
        if (g == 2u) {
            // the candidate's product is over r * h (the reset phase wrote it)
{% if phase == "step" %}
            for (unsigned k = 0; k < {{ H }}u; ++k) {
                sh += rh[(d * {{ B }}u + bb) * {{ H }}u + k] * wt[{{ off_r }}u + row * {{ H }}u + k];
            }
{% endif %}
        } else {
            for (unsigned k = 0; k < {{ H }}u; ++k) {
                sh += hs[hrow + k] * wt[{{ off_r }}u + row * {{ H }}u + k];
            }
        }
{% else %}
        for (unsigned k = 0; k < {{ H }}u; ++k) {
            sh += hs[hrow + k] * wt[{{ off_r }}u + row * {{ H }}u + k];
        }
{% endif %}
        ax[g] = sx;
        ah[g] = sh;
    }
    float h_new = h_prev;
{% for dd in range(ND) %}
    if (d == {{ dd }}u) {
{% if op == "LSTM" %}
        const float c_prev = cs[unit];
        float gi = ax[0] + ah[0];
        float go = ax[1] + ah[1];
        float gf = ax[2] + ah[2];
{% if peep %}
        const unsigned prow = {{ off_p }}u + d * {{ 3 * H }}u + j;
        gi += wt[prow] * c_prev;
        gf += wt[prow + {{ 2 * H }}u] * c_prev;
{% endif %}
        const float ig = act_{{ dd }}_0(clipped_(gi));
        const float fg = {{ "1.0f - ig" if input_forget else "act_%d_0(clipped_(gf))" % dd }};
        const float c_new = fg * c_prev + ig * act_{{ dd }}_1(clipped_(ax[3] + ah[3]));
{% if peep %}
        go += wt[prow + {{ H }}u] * c_new;
{% endif %}
        if (live) {
            cs[unit] = c_new;
            h_new = act_{{ dd }}_0(clipped_(go)) * act_{{ dd }}_2(c_new);
        }
{% elif op == "GRU" %}
        const float r = act_{{ dd }}_0(clipped_(ax[1] + ah[1]));
{% if phase == "reset" %}
        rh[unit] = r * h_prev;
{% else %}
        const float z = act_{{ dd }}_0(clipped_(ax[0] + ah[0]));
        const float hh = act_{{ dd }}_1(clipped_(ax[2] + {{ "r * ah[2]" if lbr else "ah[2]" }}));
        if (live) h_new = (1.0f - z) * hh + z * h_prev;
{% endif %}
{% else %}
        if (live) h_new = act_{{ dd }}_0(clipped_(ax[0] + ah[0]));
{% endif %}
    }
{% endfor %}
{% if phase == "step" %}
    hs[nxt + unit] = h_new;
{% if y %}
    y[{{ "((bb * %du + pos) * %du + d) * %du + j" % (T, ND, H) if layout else "((pos * %du + d) * %du + bb) * %du + j" % (ND, B, H) }}] = {{ store("y", "live ? h_new : 0.0f") }};
{% endif %}
{% endif %}
{% endif %}
}
