{{ header }}
// Elementwise over {{ total }} {{ "vec4s" if vec == 4 else "elements" }} of shape {{ dims }}: {{ label }}
{% for op in operands if op.binding is not none %}
@group(0) @binding({{ op.binding }}) var<storage, read> in{{ op.binding }}: array<{{ op.elem }}>;
{% endfor %}
@group(0) @binding({{ out_binding }}) var<storage, read_write> out: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
{% if coords %}
    var rem = i * {{ vec }}u;
{% for k in range(dims | length - 1, -1, -1) %}
    let c{{ k }} = rem % {{ dims[k] }}u;
{% if k > 0 %}
    rem = rem / {{ dims[k] }}u;
{% endif %}
{% endfor %}
{% endif %}
{% for op in operands %}
    let a{{ loop.index0 }} = {{ op.load }};
{% endfor %}
{% for name, value in lets %}
    let {{ name }} = {{ value }};
{% endfor %}
    out[i] = {{ out_t }}({{ expr }});
}
