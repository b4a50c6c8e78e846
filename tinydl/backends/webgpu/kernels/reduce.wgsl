{{ header }}
// {{ label }}: mean over {{ R }} elements for each of {{ O }} outputs; a workgroup per output,
// a strided sum per thread, then a tree in workgroup memory.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ ot }}>;

var<workgroup> part: array<f32, {{ WG }}>;

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let o = wid.y * {{ gx }}u + wid.x;
    var rem = min(o, {{ O - 1 }}u);
    var base = 0u;
{% for d in range(kept | length - 1, -1, -1) %}
    base = base + (rem % {{ kept[d][0] }}u) * {{ kept[d][1] }}u;
    rem = rem / {{ kept[d][0] }}u;
{% endfor %}
    var s = 0.0;
    for (var r = li; r < {{ R }}u; r += {{ WG }}u) {
        var q = r;
        var off = base;
{% for d in range(reduced | length - 1, -1, -1) %}
        off = off + (q % {{ reduced[d][0] }}u) * {{ reduced[d][1] }}u;
        q = q / {{ reduced[d][0] }}u;
{% endfor %}
        s = s + f32(x[off]);
    }
    part[li] = s;
{% set ns = namespace(step=WG // 2) %}
{% for _ in range(steps) %}
    workgroupBarrier();
    if (li < {{ ns.step }}u) {
        part[li] = part[li] + part[li + {{ ns.step }}u];
    }
{% set ns.step = ns.step // 2 %}
{% endfor %}
    if (li == 0u && o < {{ O }}u) {
        y[o] = {{ ot }}(part[0] / {{ R }}.0);
    }
}
