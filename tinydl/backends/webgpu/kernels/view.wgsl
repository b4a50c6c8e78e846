{{ header }}
// {{ label }}: a u8 RGB frame (N, H, W, 3, packed four bytes to a word) drawn into the canvas's
// texture, image {{ n }} of the batch; the canvas ({{ CW }}x{{ CH }}) samples it nearest.
{% set A = 1 %}
{% include "frag_common.wgsl" %}
@group(0) @binding(0) var<storage, read> src: array<u32>;

fn byte(i: u32) -> f32 {
    return f32((src[i / 4u] >> (8u * (i % 4u))) & 0xffu) / 255.0;
}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<u32>(floor(in.pos.xy * vec2<f32>({{ W }}.0 / {{ CW }}.0, {{ H }}.0 / {{ CH }}.0)));
    let i = (({{ n }}u * {{ H }}u + min(p.y, {{ H - 1 }}u)) * {{ W }}u + min(p.x, {{ W - 1 }}u)) * 3u;
    var out: FOut;
    out.o0 = vec4<f32>(byte(i), byte(i + 1u), byte(i + 2u), 1.0);
    return out;
}
