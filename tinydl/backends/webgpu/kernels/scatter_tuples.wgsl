{{ header }}
{% import "nd_index.wgsl" as nd %}
// {{ label }}: ScatterND without a reduction over {{ scan }} index tuples of {{ k }} coordinates,
// a thread per updated element: {% if copy %}first y = data ({{ total }} elements){% else %}then each writes its update (no two tuples name one place: ONNX's rule for reduction "none"){% endif %}.
{% if copy %}
@group(0) @binding(0) var<storage, read> data: array<{{ data_t }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ out_t }}>;
{% else %}
@group(0) @binding(0) var<storage, read> idx: array<i32>;
@group(0) @binding(1) var<storage, read> upd: array<{{ upd_t }}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{ out_t }}>;
{% endif %}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
{% if copy %}
    if (i >= {{ total }}u) {
        return;
    }
    y[i] = {{ out_t }}(data[i]);
{% else %}
    if (i >= {{ scan * inner }}u) {
        return;
    }
    let t = i / {{ inner }}u;
    let s = i % {{ inner }}u;
{{ nd.flat_index("t", k, kdims) -}}
    y[f * {{ inner }}u + s] = {{ out_t }}(upd[i]);
{% endif %}
}
