{{ header }}
// {{ label }}: spatial padding ({{ mode }}) as a fragment shader{{ ", edge values through the sampler's clamp-to-edge address mode" if sampled }}.
{% include "frag_common.wgsl" %}
@group(0) @binding(0) var X: texture_2d_array<f32>;
{% if sampled %}
@group(0) @binding(1) var S: sampler;
{% endif %}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<i32>(floor(in.pos.xy)) - vec2<i32>({{ PL }}, {{ PT }});
    var out: FOut;
{% for a in range(A) %}
    {
        let layer = in.n * {{ C4 }}u + {{ S0 + a }}u;
{% if mode == "constant" %}
        var r = vec4<f32>({{ value }});
        if (all(p >= vec2<i32>(0)) && all(p < vec2<i32>({{ IW }}, {{ IH }}))) {
            r = textureLoad(X, p, layer, 0);
        }
{% elif mode == "reflect" %}
        let m = vec2<i32>({{ IW - 1 }}, {{ IH - 1 }});
        let r = textureLoad(X, m - abs(m - abs(p)), layer, 0);
{% elif mode == "wrap" %}
        let n = vec2<i32>({{ IW }}, {{ IH }});
        let r = textureLoad(X, (p + n) % n, layer, 0);
{% elif sampled %}
        let r = textureSampleLevel(X, S, (vec2<f32>(p) + 0.5) / vec2<f32>({{ IW }}.0, {{ IH }}.0), layer, 0.0);
{% else %}
        let r = textureLoad(X, clamp(p, vec2<i32>(0), vec2<i32>({{ IW - 1 }}, {{ IH - 1 }})), layer, 0);
{% endif %}
        out.o{{ a }} = r;
    }
{% endfor %}
    return out;
}
