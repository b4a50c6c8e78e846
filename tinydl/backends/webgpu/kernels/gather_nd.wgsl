{{ header }}
{% import "nd_index.wgsl" as nd %}
// {{ label }}: element (t, s) of {{ total }} is element s of the slice of {{ inner }} at index tuple t ({{ k }}
// coordinates into {{ kdims }}; negative ones count from the end, any still outside is clamped)
// of batch t / {{ per_batch }}.
@group(0) @binding(0) var<storage, read> src: array<{{ in_t }}>;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> dst: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    let t = i / {{ inner }}u;
{{ nd.flat_index("t", k, kdims) -}}
    dst[i] = {{ out_t }}({{ ctype }}(src[(t / {{ per_batch }}u) * {{ batch_stride }}u + f * {{ inner }}u + i % {{ inner }}u]));
}
