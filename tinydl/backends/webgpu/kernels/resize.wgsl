{{ header }}
// {{ label }}: resize {{ dims_in }} -> {{ dims_out }}; per output axis, a table gives {{ taps_per_axis }}
// taps (input offset, weight) and an outside flag; the output sums the products over all axes.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> ti: array<i32>;
{% if weighted %}
@group(0) @binding(2) var<storage, read> tw: array<f32>;
{% endif %}
@group(0) @binding({{ 3 if weighted else 2 }}) var<storage, read_write> y: array<{{ ot }}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * 256u + li;
    if (i >= {{ total }}u) {
        return;
    }
    var rem = i;
    var outside = false;
{% for d in range(rank - 1, -1, -1) %}
    let c{{ d }} = rem % {{ dims_out[d] }}u;
    rem = rem / {{ dims_out[d] }}u;
    let e{{ d }} = {{ base[d] }}u + c{{ d }} * {{ taps_per_axis[d] + 1 }}u;
    outside = outside || ti[e{{ d }} + {{ taps_per_axis[d] }}u] != 0;
{% endfor %}
    var acc = 0.0;
{% for combo in combos %}
    acc = acc + f32(x[u32({% for d in range(rank) %}ti[e{{ d }} + {{ combo[d] }}u]{{ " + " if not loop.last }}{% endfor %})]){% for d in range(rank) if weighted and taps_per_axis[d] > 1 %} * tw[e{{ d }} + {{ combo[d] }}u]{% endfor %};
{% endfor %}
    y[i] = {{ ot }}(select(acc, {{ extrapolation }}, outside));
}
