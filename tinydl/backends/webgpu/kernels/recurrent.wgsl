{{ header }}
// {{ label }} ({{ op }}, {{ phase }}): {{ threads }} threads, one per (direction, batch entry, hidden unit); sequence
// {{ T }}, batch {{ B }}, input {{ I }}, hidden {{ H }}, layout {{ layout }}. See backends/recurrent.py.
{% for name, type, access in decls %}
@group(0) @binding({{ loop.index0 }}) var<storage, {{ access }}> {{ name }}: array<{{ type }}>;
{% endfor %}
{% for d in range(ND) %}{% for k in range(acts[d] | length) %}

fn act_{{ d }}_{{ k }}(x: f32) -> f32 {
    let a = {{ acts[d][k][1] }};
    let b = {{ acts[d][k][2] }};
    return {{ acts[d][k][0] }};
}
{% endfor %}{% endfor %}

fn clipped(x: f32) -> f32 {
    return {{ "clamp(x, -%s, %s)" % (clip, clip) if clip else "x" }};
}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ threads }}u) {
        return;
    }
    let j = i % {{ H }}u;
    let bb = (i / {{ H }}u) % {{ B }}u;
    let d = i / {{ B * H }}u;
    let unit = (d * {{ B }}u + bb) * {{ H }}u + j;
{% set state_at = "(bb * %du + d) * %du + j" % (ND, H) if layout else "unit" %}
{% if phase == "init" %}
    hs[unit] = {{ "f32(init_h[" ~ state_at ~ "])" if has_init[0] else "0.0" }};
{% if op == "LSTM" %}
    cs[unit] = {{ "f32(init_c[" ~ state_at ~ "])" if has_init[1] else "0.0" }};
{% endif %}
{% elif phase == "final" %}
{% if yh %}
    y_h[{{ state_at }}] = {{ yh_t }}(hs[{{ (T % 2) * ND * B * H }}u + unit]);
{% endif %}
{% if yc %}
    y_c[{{ state_at }}] = {{ yc_t }}(cs[unit]);
{% endif %}
{% else %}
    let s = u32(step[0]);
    let len = {{ "u32(lens[bb])" if has_lens else T ~ "u" }};
    let live = s < len;
    let rev = {{ "d == 1u" if directions == [False, True] else ("true" if directions[0] else "false") }};
    let pos = select(s, len - 1u - s, rev && live);
    let cur = (s % 2u) * {{ ND * B * H }}u;
    let nxt = {{ ND * B * H }}u - cur;
    let hrow = cur + (d * {{ B }}u + bb) * {{ H }}u;
    let h_prev = hs[cur + unit];
    let xrow = {{ "(bb * %du + pos) * %du" % (T, I) if layout else "(pos * %du + bb) * %du" % (B, I) }};
    // The input and recurrent products of this unit's gates, with their biases.
    var ax: array<f32, {{ G }}>;
    var ah: array<f32, {{ G }}>;
    for (var g = 0u; g < {{ G }}u; g++) {
        let row = (d * {{ G }}u + g) * {{ H }}u + j;
        var sx = wt[{{ off_b }}u + d * {{ 2 * G * H }}u + g * {{ H }}u + j];
        for (var k = 0u; k < {{ I }}u; k++) {
            sx = sx + f32(x[xrow + k]) * wt[{{ off_w }}u + row * {{ I }}u + k];
        }
        var sh = wt[{{ off_b + G * H }}u + d * {{ 2 * G * H }}u + g * {{ H }}u + j];
{% if op == "GRU" and not lbr %}
        if (g == 2u) {
            // the candidate's product is over r ⊙ h (the reset phase wrote it)
{% if phase == "step" %}
            for (var k = 0u; k < {{ H }}u; k++) {
                sh = sh + rh[(d * {{ B }}u + bb) * {{ H }}u + k] * wt[{{ off_r }}u + row * {{ H }}u + k];
            }
{% endif %}
        } else {
            for (var k = 0u; k < {{ H }}u; k++) {
                sh = sh + hs[hrow + k] * wt[{{ off_r }}u + row * {{ H }}u + k];
            }
        }
{% else %}
        for (var k = 0u; k < {{ H }}u; k++) {
            sh = sh + hs[hrow + k] * wt[{{ off_r }}u + row * {{ H }}u + k];
        }
{% endif %}
        ax[g] = sx;
        ah[g] = sh;
    }
    var h_new = h_prev;
{% for dd in range(ND) %}
    if (d == {{ dd }}u) {
{% if op == "LSTM" %}
        let c_prev = cs[unit];
        var gi = ax[0] + ah[0];
        var go = ax[1] + ah[1];
        var gf = ax[2] + ah[2];
{% if peep %}
        let prow = {{ off_p }}u + d * {{ 3 * H }}u + j;
        gi = gi + wt[prow] * c_prev;
        gf = gf + wt[prow + {{ 2 * H }}u] * c_prev;
{% endif %}
        let ig = act_{{ dd }}_0(clipped(gi));
        let fg = {{ "1.0 - ig" if input_forget else "act_%d_0(clipped(gf))" % dd }};
        let c_new = fg * c_prev + ig * act_{{ dd }}_1(clipped(ax[3] + ah[3]));
{% if peep %}
        go = go + wt[prow + {{ H }}u] * c_new;
{% endif %}
        if (live) {
            cs[unit] = c_new;
            h_new = act_{{ dd }}_0(clipped(go)) * act_{{ dd }}_2(c_new);
        }
{% elif op == "GRU" %}
        let r = act_{{ dd }}_0(clipped(ax[1] + ah[1]));
{% if phase == "reset" %}
        rh[unit] = r * h_prev;
{% else %}
        let z = act_{{ dd }}_0(clipped(ax[0] + ah[0]));
        let hh = act_{{ dd }}_1(clipped(ax[2] + {{ "r * ah[2]" if lbr else "ah[2]" }}));
        if (live) {
            h_new = (1.0 - z) * hh + z * h_prev;
        }
{% endif %}
{% else %}
        if (live) {
            h_new = act_{{ dd }}_0(clipped(ax[0] + ah[0]));
        }
{% endif %}
    }
{% endfor %}
{% if phase == "step" %}
    hs[nxt + unit] = h_new;
{% if y %}
    y[{{ "((bb * %du + pos) * %du + d) * %du + j" % (T, ND, H) if layout else "((pos * %du + d) * %du + bb) * %du + j" % (ND, B, H) }}] = {{ y_t }}(select(0.0, h_new, live));
{% endif %}
{% endif %}
{% endif %}
}
