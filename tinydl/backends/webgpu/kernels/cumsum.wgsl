{{ header }}
// {{ label }}: running {{ "exclusive " if exclusive }}sums{{ " from the end" if reverse }} of {{ lines }} lines of {{ L }} elements ({{ inner }} apart), a
// thread per line, in {{ acc }}.
@group(0) @binding(0) var<storage, read> x: array<{{ in_t }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ lines }}u) {
        return;
    }
    let base = (i / {{ inner }}u) * {{ L * inner }}u + i % {{ inner }}u;
    var s = {{ acc }}(0);
    for (var r = 0u; r < {{ L }}u; r++) {
        let at = base + {{ "(" ~ (L - 1) ~ "u - r)" if reverse else "r" }} * {{ inner }}u;
        let v = {{ acc }}(x[at]);
{% if exclusive %}
        y[at] = {{ out_t }}(s);
        s = s + v;
{% else %}
        s = s + v;
        y[at] = {{ out_t }}(s);
{% endif %}
    }
}
