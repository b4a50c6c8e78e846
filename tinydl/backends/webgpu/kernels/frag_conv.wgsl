{{ header }}
// {{ label }}: a convolution as a fragment shader ({{ kind }}), output slices {{ S0 }}..{{ S0 + A - 1 }} of
// {{ OS4 }} (4 channels each) as {{ A }} render target(s); weights: {{ wmode }}.
{% include "frag_common.wgsl" %}
@group(0) @binding(0) var X: texture_2d_array<f32>;
{% include "frag_weights.wgsl" %}

fn inside(q: vec2<i32>) -> bool {
    return all(q >= vec2<i32>(0)) && all(q < vec2<i32>({{ IW }}, {{ IH }}));
}

{# Each tap of the window. With a fused pixel shuffle (BS > 1, kind "mat" only, weights not
   constants) the output pixel's phase `ph` picks the conv channels: it offsets the weight index,
   so neighbouring pixels run the same code. #}
{% set PHS = A * KH * KW * C4 %}
{% macro accumulate() %}
{% if kind == "mat" and wmode != "const" %}
    for (var t = 0u; t < {{ KH * KW }}u; t++) {
        let q = q0 + vec2<i32>(i32(t % {{ KW }}u) * {{ DW }}, i32(t / {{ KW }}u) * {{ DH }});
        if (inside(q)) {
            for (var c = 0u; c < {{ C4 }}u; c++) {
                let v = textureLoad(X, q, base + c, 0);
{% for a in range(A) %}
                acc{{ a }} += wm(wph + ({{ a * KH * KW }}u + t) * {{ C4 }}u + c) * v;
{% endfor %}
            }
        }
    }
{% else %}
{% for t in range(KH * KW) %}
{% set ky = t // KW %}
{% set kx = t % KW %}
    {
        let q = q0 + vec2<i32>({{ kx * DW }}, {{ ky * DH }});
        if (inside(q)) {
{% if kind == "mat" %}
{% for c in range(C4) %}
            {
                let v = textureLoad(X, q, base + {{ c }}u, 0);
{% for a in range(A) %}
                acc{{ a }} += {{ M((a * KH * KW + t) * C4 + c) }} * v;
{% endfor %}
            }
{% endfor %}
{% elif kind == "dw" %}
{% for a in range(A) %}
            acc{{ a }} += {{ V(a * KH * KW + t) }} * textureLoad(X, q, base + {{ S0 + a }}u, 0);
{% endfor %}
{% else %}
{% for a in range(A) %}
{% for i in range(CG) %}
            acc{{ a }} += {{ V((a * CG + i) * KH * KW + t) }} * vec4<f32>(
{% for j in range(4) %}
{% set ch = chans[a][j][i] %}
                {{ "textureLoad(X, q, base + %du, 0)[%d]" % (ch // 4, ch % 4) if ch >= 0 else "0.0" }}{{ "," if j < 3 }}
{% endfor %}
            );
{% endfor %}
{% endfor %}
{% endif %}
        }
    }
{% endfor %}
{% endif %}
{% endmacro %}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<i32>(floor(in.pos.xy));
    let base = in.n * {{ C4 }}u;
    let q0 = (p / {{ BS }}) * vec2<i32>({{ SW }}, {{ SH }}) - vec2<i32>({{ PL }}, {{ PT }});
{% if BS == 1 %}
    let ph = 0u;
{% else %}
    let ph = u32((p.y % {{ BS }}) * {{ BS }} + p.x % {{ BS }});
{% endif %}
    let wph = ph * {{ PHS }}u;
{% for a in range(A) %}
    var acc{{ a }} = vec4<f32>(0.0);
{% endfor %}
{{ accumulate() }}
    var out: FOut;
{% for a in range(A) %}
    {
{% if wmode == "const" %}
        let bias = {{ V(NB + a) }};
{% if has_slope %}
        let slope = {{ V(NB + A + a) }};
{% endif %}
{% else %}
        let bias = wv({{ NB }}u + ph * {{ A }}u + {{ a }}u);
{% if has_slope %}
        let slope = wv({{ NB + BS * BS * A }}u + ph * {{ A }}u + {{ a }}u);
{% endif %}
{% endif %}
        var r = acc{{ a }} + bias;
{% for line in epilogue %}
        r = {{ line }};
{% endfor %}
{% if lanes[a] < 4 %}
        r = select(vec4<f32>(0.0), r, vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>({{ lanes[a] }}u));
{% endif %}
        out.o{{ a }} = r;
    }
{% endfor %}
    return out;
}
