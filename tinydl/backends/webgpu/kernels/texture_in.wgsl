{{ header }}
// {{ label }}: a buffer value ({{ source }}) into a texture, as a fragment shader; output slices
// {{ S0 }}..{{ S0 + A - 1 }} as {{ A }} render target(s).
{% include "frag_common.wgsl" %}
@group(0) @binding(0) var<storage, read> src: array<{{ "u32" if source == "nhwc-u8" else st }}>;

fn channel(n: u32, c: u32, y: u32, x: u32) -> f32 {
{% if source == "nhwc-u8" %}
    let i = ((n * {{ H }}u + y) * {{ W }}u + x) * {{ C }}u + c;
    return f32((src[i / 4u] >> (8u * (i % 4u))) & 0xffu);
{% else %}
    return f32(src[((n * {{ C }}u + c) * {{ H }}u + y) * {{ W }}u + x]);
{% endif %}
}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<u32>(floor(in.pos.xy));
    var out: FOut;
{% for a in range(A) %}
    out.o{{ a }} = vec4<f32>(
{% for j in range(4) %}
{% set c = 4 * (S0 + a) + j %}
        {{ "channel(in.n, %du, p.y, p.x)" % c if c < C else "0.0" }}{{ "," if j < 3 }}
{% endfor %}
    );
{% endfor %}
    return out;
}
