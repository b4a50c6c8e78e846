{{ header }}
{% import "tree.wgsl" as tree %}
// {{ label }}: {{ "log-softmax" if log else "softmax" }} over {{ L }} elements (stride {{ inner }}) for each of {{ rows }} rows; a
// workgroup per row: max, then the sum of exponentials, then the normalized write.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ ot }}>;

var<workgroup> part: array<f32, {{ WG }}>;

fn reduce_max(li: u32) -> f32 {
{{ tree.fold(WG, steps, "max({a}, {b})") }}
    workgroupBarrier();
    let r = part[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(li: u32) -> f32 {
{{ tree.fold(WG, steps, "{a} + {b}") }}
    workgroupBarrier();
    let r = part[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = min(wid.y * {{ gx }}u + wid.x, {{ rows - 1 }}u);
    let base = (row / {{ inner }}u) * {{ L * inner }}u + row % {{ inner }}u;
    var m = -3.40282347e+38;
    for (var k = li; k < {{ L }}u; k += {{ WG }}u) {
        m = max(m, f32(x[base + k * {{ inner }}u]));
    }
    part[li] = m;
    m = reduce_max(li);
    var s = 0.0;
    for (var k = li; k < {{ L }}u; k += {{ WG }}u) {
        s = s + exp(f32(x[base + k * {{ inner }}u]) - m);
    }
    part[li] = s;
    s = reduce_sum(li);
    if (wid.y * {{ gx }}u + wid.x < {{ rows }}u) {
        for (var k = li; k < {{ L }}u; k += {{ WG }}u) {
            let i = base + k * {{ inner }}u;
{% if log %}
            y[i] = {{ ot }}(f32(x[i]) - m - log(s));
{% else %}
            y[i] = {{ ot }}(exp(f32(x[i]) - m) / s);
{% endif %}
        }
    }
}
