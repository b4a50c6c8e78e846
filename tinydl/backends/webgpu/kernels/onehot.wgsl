{{ header }}
// {{ label }}: element (o, j, n) of a ({{ total // (depth * inner) }}, {{ depth }}, {{ inner }}) output is values[1] where index (o, n)
// (negative counts from {{ depth }}) equals j, values[0] elsewhere.
@group(0) @binding(0) var<storage, read> idx: array<{{ idx_t }}>;
@group(0) @binding(1) var<storage, read> values: array<{{ val_t }}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    let n = i % {{ inner }}u;
    let j = (i / {{ inner }}u) % {{ depth }}u;
    let o = i / {{ depth * inner }}u;
    var q = i32(idx[o * {{ inner }}u + n]);
    if (q < 0) {
        q = q + {{ depth }};
    }
    y[i] = {{ out_t }}(select(values[0], values[1], q == i32(j)));
}
