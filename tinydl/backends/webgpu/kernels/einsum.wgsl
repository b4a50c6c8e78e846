{{ header }}
// {{ label }}: each of {{ total }} output elements (dims {{ out_dims }}) sums {{ count }} products of {{ n }} operands
// (summed dims {{ sum_dims }}), in {{ acc }}.
{% for o in range(n) %}
@group(0) @binding({{ o }}) var<storage, read> x{{ o }}: array<{{ in_t[o] }}>;
{% endfor %}
@group(0) @binding({{ n }}) var<storage, read_write> y: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    var rem = i;
{% for o in range(n) %}
    var b{{ o }} = 0u;
{% endfor %}
{% for d in range(out_dims | length - 1, -1, -1) %}
    {
        let c = rem % {{ out_dims[d] }}u;
        rem = rem / {{ out_dims[d] }}u;
{% for o in range(n) %}{% if out_strides[o][d] %}
        b{{ o }} = b{{ o }} + c * {{ out_strides[o][d] }}u;
{% endif %}{% endfor %}
    }
{% endfor %}
    var s = {{ acc }}(0);
    for (var r = 0u; r < {{ count }}u; r++) {
        var q = r;
{% for o in range(n) %}
        var a{{ o }} = b{{ o }};
{% endfor %}
{% for d in range(sum_dims | length - 1, -1, -1) %}
        {
            let c = q % {{ sum_dims[d] }}u;
            q = q / {{ sum_dims[d] }}u;
{% for o in range(n) %}{% if sum_strides[o][d] %}
            a{{ o }} = a{{ o }} + c * {{ sum_strides[o][d] }}u;
{% endif %}{% endfor %}
        }
{% endfor %}
        s = s + {% for o in range(n) %}{{ acc }}(x{{ o }}[a{{ o }}]){{ " * " if not loop.last }}{% endfor %};
    }
    y[i] = {{ out_t }}(s);
}
