{{ header }}
// {{ label }}: {{ "max" if is_max else "average" }} pooling, one output per thread; input
// {{ dims_in }}, output {{ dims_out }}, kernel {{ kernel }}, stride {{ strides }}, dilation {{ dilations }}.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ ot }}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * 256u + li;
    if (i >= {{ total }}u) {
        return;
    }
    var rem = i;
{% for d in range(nd - 1, -1, -1) %}
    let o{{ d }} = i32(rem % {{ dims_out[d] }}u);
    rem = rem / {{ dims_out[d] }}u;
{% endfor %}
    let base = rem * {{ plane }}u;
{% if is_max %}
    var acc = {{ lowest }};
{% else %}
    var acc = 0.0;
    var count = 0.0;
{% endif %}
{% for tap in taps %}
    {
{% for d in range(nd) %}
        let i{{ d }} = o{{ d }} * {{ strides[d] }} + {{ tap[d] * dilations[d] - pads[d] }};
{% endfor %}
        let inside = {% for d in range(nd) %}i{{ d }} >= 0 && i{{ d }} < {{ dims_in[d] }}{{ " && " if not loop.last }}{% endfor %};
{% if is_max %}
        if (inside) {
            acc = max(acc, {{ ct }}(x[base{% for d in range(nd) %} + u32(i{{ d }}) * {{ in_strides[d] }}u{% endfor %}]));
        }
{% else %}
        if (inside) {
            acc = acc + f32(x[base{% for d in range(nd) %} + u32(i{{ d }}) * {{ in_strides[d] }}u{% endfor %}]);
            count = count + 1.0;
{% if include_pad %}
        } else if ({% for d in range(nd) %}i{{ d }} >= {{ -pads[d] }} && i{{ d }} < {{ dims_in[d] + pads_end[d] }}{{ " && " if not loop.last }}{% endfor %}) {
            count = count + 1.0;
{% endif %}
        }
{% endif %}
    }
{% endfor %}
{% if is_max %}
    y[i] = {{ ot }}(acc);
{% else %}
    y[i] = {{ ot }}(acc / count);
{% endif %}
}
