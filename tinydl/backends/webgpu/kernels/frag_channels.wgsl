{{ header }}
// {{ label }}: channels gathered from {{ K }} texture(s) as a fragment shader (Concat, Slice and
// DepthToSpace), output slices {{ S0 }}..{{ S0 + A - 1 }} as {{ A }} render target(s).
{% include "frag_common.wgsl" %}
{% for k in range(K) %}
@group(0) @binding({{ k }}) var X{{ k }}: texture_2d_array<f32>;
{% endfor %}

{% macro lanes(ph, a) %}vec4<f32>(
{% for j in range(4) %}
{% set s = src[ph][a][j] %}
            {{ "textureLoad(X%d, q, in.n * %du + %du, 0)[%d]" % (s[0], C4s[s[0]], s[1] // 4, s[1] % 4) if s else "0.0" }}{{ "," if j < 3 }}
{% endfor %}
        ){% endmacro %}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<i32>(floor(in.pos.xy));
    let q = p / {{ BS }};
    var out: FOut;
{% if BS == 1 %}
{% for a in range(A) %}
    out.o{{ a }} = {{ lanes(0, a) }};
{% endfor %}
{% else %}
    switch u32((p.y % {{ BS }}) * {{ BS }} + p.x % {{ BS }}) {
{% for ph in range(BS * BS) %}
        case {{ ph }}u: {
{% for a in range(A) %}
            out.o{{ a }} = {{ lanes(ph, a) }};
{% endfor %}
        }
{% endfor %}
        default: {}
    }
{% endif %}
    return out;
}
