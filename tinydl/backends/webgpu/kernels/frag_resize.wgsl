{{ header }}
// {{ label }}: Resize over H and W as a fragment shader: per output row and column, {{ TY }} and
// {{ TX }} taps (input index, weight) from the op reference's own coordinate rules{{ "; here
// bilinear fetches (texture coordinate, weight) through a linear sampler, two taps each" if sampled }}.
{% include "frag_common.wgsl" %}
@group(0) @binding(0) var X: texture_2d_array<f32>;
@group(0) @binding(1) var<storage, read> taps: array<vec2<f32>>;
{% if sampled %}
@group(0) @binding(2) var S: sampler;
{% endif %}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<i32>(floor(in.pos.xy));
    var out: FOut;
{% for a in range(A) %}
    {
        let layer = in.n * {{ C4 }}u + {{ S0 + a }}u;
        var r = vec4<f32>(0.0);
        for (var ty = 0u; ty < {{ TY }}u; ty++) {
            let ry = taps[u32(p.y) * {{ TY }}u + ty];
            var row = vec4<f32>(0.0);
            for (var tx = 0u; tx < {{ TX }}u; tx++) {
                let rx = taps[{{ OH * TY }}u + u32(p.x) * {{ TX }}u + tx];
{% if sampled %}
                row += rx.y * textureSampleLevel(X, S, vec2<f32>(rx.x, ry.x), layer, 0.0);
{% else %}
                row += rx.y * textureLoad(X, vec2<i32>(i32(rx.x), i32(ry.x)), layer, 0);
{% endif %}
            }
            r += ry.y * row;
        }
        out.o{{ a }} = r;
    }
{% endfor %}
    return out;
}
