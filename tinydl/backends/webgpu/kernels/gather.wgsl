{{ header }}
// {{ label }}: each element of a {{ dims }} region reads src at the sum of per-axis table
// entries (a negative entry means padding) and writes dst at {{ base }} + coords . strides.
@group(0) @binding(0) var<storage, read> src: array<{{ in_t }}>;
@group(0) @binding(1) var<storage, read> tab: array<i32>;
@group(0) @binding(2) var<storage, read_write> dst: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    var rem = i;
    var at = 0;
    var inside = true;
    var to_off = {{ base }}u;
{% for k in range(dims | length - 1, -1, -1) %}
    {
        let c = rem % {{ dims[k] }}u;
        rem = rem / {{ dims[k] }}u;
        let t = tab[{{ tbase[k] }}u + c];
        inside = inside && t >= 0;
        at = at + t;
        to_off = to_off + c * {{ ostrides[k] }}u;
    }
{% endfor %}
    var v = {{ ctype }}({{ pad }});
    if (inside) {
        v = {{ ctype }}(src[u32(at)]);
    }
    dst[to_off] = {{ out_t }}(v);
}
