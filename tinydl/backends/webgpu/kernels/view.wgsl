{{ header }}
// {{ label }}: a u8 RGB frame (N, H, W, 3, packed four bytes to a word) drawn into the canvas's
// texture, image {{ n }} of the batch; the canvas ({{ CW }}x{{ CH }}) samples it nearest.
{% if overlay %}
// Over it, at the top left, a line of text (the frame rate) in a 3x5 pixel font magnified
// {{ K }}x, white on the frame darkened: `text` holds the length, then up to {{ 4 * TEXT - 1 }} glyph
// numbers; a glyph's 15 bits are its rows top to bottom, three columns left to right.
{% endif %}
{% set A = 1 %}
{% include "frag_common.wgsl" %}
@group(0) @binding(0) var<storage, read> src: array<u32>;
{% if overlay %}
@group(0) @binding(1) var<uniform> text: array<vec4<u32>, {{ TEXT }}>;
const FONT = array<u32, {{ font | length }}>({{ font | join("u, ") }}u);
{% endif %}

fn byte(i: u32) -> f32 {
    return f32((src[i / 4u] >> (8u * (i % 4u))) & 0xffu) / 255.0;
}

@fragment
fn fs(in: VOut) -> FOut {
    let p = vec2<u32>(floor(in.pos.xy * vec2<f32>({{ W }}.0 / {{ CW }}.0, {{ H }}.0 / {{ CH }}.0)));
    let i = (({{ n }}u * {{ H }}u + min(p.y, {{ H - 1 }}u)) * {{ W }}u + min(p.x, {{ W - 1 }}u)) * 3u;
    var out: FOut;
    out.o0 = vec4<f32>(byte(i), byte(i + 1u), byte(i + 2u), 1.0);
{% if overlay %}
    // the text box: a margin of one font pixel around 4x6-pixel glyph cells
    let q = vec2<i32>(floor(in.pos.xy)) / {{ K }} - vec2<i32>({{ X0 - 1 }}, {{ Y0 - 1 }});
    let length = i32(text[0].x);
    if (length > 0 && all(q >= vec2<i32>(0)) && all(q < vec2<i32>(4 * length + 1, 7))) {
        out.o0 = vec4<f32>(out.o0.rgb * 0.25, 1.0);
        let c = q - vec2<i32>(1);
        if (all(c >= vec2<i32>(0))) {
            let g = u32(c.x) / 4u + 1u;
            let col = u32(c.x) % 4u;
            let code = text[g / 4u][g % 4u];
            if (col < 3u && c.y < 5 && ((FONT[code] >> (u32(c.y) * 3u + col)) & 1u) == 1u) {
                out.o0 = vec4<f32>(1.0);
            }
        }
    }
{% endif %}
    return out;
}
