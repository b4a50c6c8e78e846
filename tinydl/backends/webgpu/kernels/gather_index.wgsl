{{ header }}
// {{ label }}: each element of a {{ dims }} region reads src at its coordinates . {{ sstrides }}
// plus index * {{ axis_stride }}, the index read at coordinates . {{ istrides }} (a negative
// one counts from the end of the axis of {{ axis_dim }}; any still outside it is clamped).
@group(0) @binding(0) var<storage, read> src: array<{{ in_t }}>;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> dst: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    var rem = i;
    var at = 0u;
    var ip = 0u;
{% for k in range(dims | length - 1, -1, -1) %}
    {
        let c = rem % {{ dims[k] }}u;
        rem = rem / {{ dims[k] }}u;
{% if sstrides[k] %}
        at = at + c * {{ sstrides[k] }}u;
{% endif %}
{% if istrides[k] %}
        ip = ip + c * {{ istrides[k] }}u;
{% endif %}
    }
{% endfor %}
    var j = idx[ip];
    if (j < 0) {
        j = j + {{ axis_dim }};
    }
    j = clamp(j, 0, {{ axis_dim - 1 }});
    dst[i] = {{ out_t }}({{ ctype }}(src[at + u32(j) * {{ axis_stride }}u]));
}
