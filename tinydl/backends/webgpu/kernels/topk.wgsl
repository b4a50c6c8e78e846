{{ header }}
{% import "tree.wgsl" as tree %}
// {{ label }}: the {{ K }} {{ "largest" if largest else "smallest" }} of {{ L }} elements (stride {{ inner }}) for each of {{ rows }} rows,
// in order, equal values by index; a workgroup per row makes a pass per output: the first element
// (in that order) after the one the last pass found. This dispatch makes outputs {{ J0 }} to {{ J1 - 1 }}
// (several dispatches where a device caps a shader's loops), starting after output {{ J0 }} - 1.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ ot }}>;
@group(0) @binding(2) var<storage, read_write> idx: array<{{ it }}>;

const NONE = 0xffffffffu;
var<workgroup> part: array<{{ acc }}, {{ WG }}>;
var<workgroup> index: array<u32, {{ WG }}>;

// (a, ia) comes before (b, ib); NONE (no element) comes after every element.
fn before(a: {{ acc }}, ia: u32, b: {{ acc }}, ib: u32) -> bool {
    if (ia == NONE || ib == NONE) {
        return ib == NONE && ia != NONE;
    }
    return a {{ ">" if largest else "<" }} b || (a == b && ia < ib);
}

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = min(wid.y * {{ gx }}u + wid.x, {{ rows - 1 }}u);
    let base = (row / {{ inner }}u) * {{ L * inner }}u + row % {{ inner }}u;
    let out = (row / {{ inner }}u) * {{ K * inner }}u + row % {{ inner }}u;
    var pv = {{ acc }}(0);
    var pi = NONE;
{% if J0 > 0 %}
    pi = u32(idx[out + {{ (J0 - 1) * inner }}u]);  // (the value read again: y may be narrower)
    pv = {{ acc }}(x[base + pi * {{ inner }}u]);
{% endif %}
    for (var j = {{ J0 }}u; j < {{ J1 }}u; j++) {
        var bv = {{ acc }}(0);
        var bi = NONE;
        for (var r = li; r < {{ L }}u; r += {{ WG }}u) {
            let v = {{ acc }}(x[base + r * {{ inner }}u]);
            if ((pi == NONE || before(pv, pi, v, r)) && before(v, r, bv, bi)) {
                bv = v;
                bi = r;
            }
        }
        part[li] = bv;
        index[li] = bi;
{{ tree.fold_pairs(WG, steps) }}
        workgroupBarrier();
        pv = part[0];
        pi = index[0];
        workgroupBarrier();
        if (li == 0u && wid.y * {{ gx }}u + wid.x < {{ rows }}u) {
            y[out + j * {{ inner }}u] = {{ ot }}(pv);
            idx[out + j * {{ inner }}u] = {{ it }}(pi);
        }
    }
}
