{{ header }}
// {{ label }}: a texture value into a buffer ({{ target }}), one invocation per output word.
@group(0) @binding(0) var X: texture_2d_array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<{{ "u32" if target == "nhwc-u8" else ot }}>;

fn channel(i: u32) -> f32 {
{% if target == "nhwc-u8" %}
    let c = i % {{ C }}u;
    let x = (i / {{ C }}u) % {{ W }}u;
    let y = (i / {{ C * W }}u) % {{ H }}u;
    let n = i / {{ C * W * H }}u;
{% else %}
    let x = i % {{ W }}u;
    let y = (i / {{ W }}u) % {{ H }}u;
    let c = (i / {{ W * H }}u) % {{ C }}u;
    let n = i / {{ C * W * H }}u;
{% endif %}
    return textureLoad(X, vec2<u32>(x, y), n * {{ C4 }}u + c / 4u, 0)[c % 4u];
}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ units }}u) {
        return;
    }
{% if target == "nhwc-u8" %}
    // Float to u8 truncates (NumPy's astype on 0..255), as cast_u8.wgsl does.
    var word = 0u;
{% for k in range(4) %}
    if (i * 4u + {{ k }}u < {{ total }}u) {
        word = word | (u32(clamp(channel(i * 4u + {{ k }}u), 0.0, 255.0)) << {{ 8 * k }}u);
    }
{% endfor %}
    dst[i] = word;
{% else %}
    dst[i] = {{ ot }}(channel(i));
{% endif %}
}
