{{ header }}
// {{ label }}: elementwise as a fragment shader over {{ K }} same-shaped texture(s), output slices
// {{ S0 }}..{{ S0 + A - 1 }} as {{ A }} render target(s).
{% include "frag_common.wgsl" %}
{% for k in range(K) %}
@group(0) @binding({{ k }}) var X{{ k }}: texture_2d_array<f32>;
{% endfor %}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<i32>(floor(in.pos.xy));
    var out: FOut;
{% for a in range(A) %}
    {
        let layer = in.n * {{ C4 }}u + {{ S0 + a }}u;
{% for k in range(K) %}
        let x{{ k }} = textureLoad(X{{ k }}, p, layer, 0);
{% endfor %}
{% for line in lines[a] %}
        {{ line }}
{% endfor %}
        out.o{{ a }} = r;
    }
{% endfor %}
    return out;
}
