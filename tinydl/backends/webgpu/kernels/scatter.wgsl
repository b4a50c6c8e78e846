{{ header }}
// {{ label }}: each of {{ total }} output elements starts from data and applies, in order, every update that
// targets it (reduction {{ reduction }}), in {{ acc }}: {{ "it compares its position with " ~ scan ~ " index tuples of " ~ k ~ " coordinates" if nd else "it reads the " ~ scan ~ " updates along axis " ~ axis ~ " that share its other coordinates" }}.
@group(0) @binding(0) var<storage, read> data: array<{{ data_t }}>;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read> upd: array<{{ upd_t }}>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ out_t }}>;

fn combine(v: {{ acc }}, u: {{ acc }}) -> {{ acc }} {
    return {{ combine }};
}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    var v = {{ acc }}(data[i]);
{% if nd %}
    let lead = i / {{ inner }}u;
    let s = i % {{ inner }}u;
    for (var t = 0u; t < {{ scan }}u; t++) {
        var f = 0u;
{% for j in range(k) %}
        {
            var q = idx[t * {{ k }}u + {{ j }}u];
            if (q < 0) {
                q = q + {{ kdims[j] }};
            }
            f = f * {{ kdims[j] }}u + u32(q);
        }
{% endfor %}
        if (f == lead) {
            v = combine(v, {{ acc }}(upd[t * {{ inner }}u + s]));
        }
    }
{% else %}
    var rem = i;
    var ubase = 0u;
    var inside = true;
    var c = 0u;
{% for d in range(dims | length - 1, -1, -1) %}
    {
        let cd = rem % {{ dims[d] }}u;
        rem = rem / {{ dims[d] }}u;
{% if d == axis %}
        c = cd;
{% else %}
        inside = inside && cd < {{ udims[d] }}u;
        ubase = ubase + cd * {{ ustrides[d] }}u;
{% endif %}
    }
{% endfor %}
    if (inside) {
        for (var r = 0u; r < {{ scan }}u; r++) {
            let at = ubase + r * {{ ustrides[axis] }}u;
            var q = idx[at];
            if (q < 0) {
                q = q + {{ dims[axis] }};
            }
            if (q == i32(c)) {
                v = combine(v, {{ acc }}(upd[at]));
            }
        }
    }
{% endif %}
    y[i] = {{ out_t }}(v);
}
