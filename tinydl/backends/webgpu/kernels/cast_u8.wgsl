{{ header }}
// {{ label }}: {{ total }} bytes {{ "unpacked from" if unpack else "packed into" }} u32 words, four to a word
// (WGSL has no 8-bit type). Packing, each thread writes one whole word, so no two threads share one.
{% if unpack %}
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<{{ out_t }}>;
{% else %}
@group(0) @binding(0) var<storage, read> src: array<{{ in_t }}>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

// Float to u8 truncates (NumPy's astype on 0..255); int32 wraps modulo 256, as NumPy does.
fn to_byte(v: {{ in_t }}) -> u32 {
{% if in_t == "i32" %}
    return bitcast<u32>(v) & 0xffu;
{% else %}
    return u32(clamp(f32(v), 0.0, 255.0));
{% endif %}
}
{% endif %}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ units }}u) {
        return;
    }
{% if unpack %}
    dst[i] = {{ out_t }}((src[i / 4u] >> (8u * (i % 4u))) & 0xffu);
{% else %}
    var word = 0u;
{% for k in range(4) %}
    if (i * 4u + {{ k }}u < {{ total }}u) {
        word = word | (to_byte(src[i * 4u + {{ k }}u]) << {{ 8 * k }}u);
    }
{% endfor %}
    dst[i] = word;
{% endif %}
}
