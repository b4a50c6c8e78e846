{{ header }}
{% import "tree.wgsl" as tree %}
// {{ label }}: {{ "the index of the " ~ ("largest" if arg == "max" else "smallest") if arg else "a reduction" }} over {{ R }} elements for each of {{ O }} outputs; a workgroup per
// output, a strided pass per thread, then a tree in workgroup memory ({{ acc }} throughout).
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ ot }}>;

var<workgroup> part: array<{{ acc }}, {{ WG }}>;
{% if arg %}
var<workgroup> index: array<u32, {{ WG }}>;

// (a, ia) comes before (b, ib): {{ "larger" if arg == "max" else "smaller" }}, then the {{ "last" if last else "first" }} index among equals.
fn before(a: {{ acc }}, ia: u32, b: {{ acc }}, ib: u32) -> bool {
    return a {{ ">" if arg == "max" else "<" }} b || (a == b && ia {{ ">" if last else "<" }} ib);
}
{% else %}

fn combine(a: {{ acc }}, b: {{ acc }}) -> {{ acc }} {
    return {{ combine }};
}
{% endif %}

// The offset of element r (in reduced-axes order) of the output whose first element is at base.
fn at(base: u32, r: u32) -> u32 {
    var q = r;
    var off = base;
{% for d in range(reduced | length - 1, -1, -1) %}
    off = off + (q % {{ reduced[d][0] }}u) * {{ reduced[d][1] }}u;
    q = q / {{ reduced[d][0] }}u;
{% endfor %}
    return off;
}

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let o = wid.y * {{ gx }}u + wid.x;
    var rem = min(o, {{ O - 1 }}u);
    var base = 0u;
{% for d in range(kept | length - 1, -1, -1) %}
    base = base + (rem % {{ kept[d][0] }}u) * {{ kept[d][1] }}u;
    rem = rem / {{ kept[d][0] }}u;
{% endfor %}
{% if arg %}
    var best = {{ acc }}(x[at(base, min(li, {{ R - 1 }}u))]);
    var bi = min(li, {{ R - 1 }}u);
    for (var r = li + {{ WG }}u; r < {{ R }}u; r += {{ WG }}u) {
        let v = {{ acc }}(x[at(base, r)]);
        if (before(v, r, best, bi)) {
            best = v;
            bi = r;
        }
    }
    part[li] = best;
    index[li] = bi;
{{ tree.fold_pairs(WG, steps) }}
    if (li == 0u && o < {{ O }}u) {
        y[o] = {{ ot }}(index[0]);
    }
{% else %}
{% if shift %}
    // The largest element first, so that exp never overflows (0 when it is -inf: log(0) stays).
    var m = {{ lowest }};
    for (var r = li; r < {{ R }}u; r += {{ WG }}u) {
        m = max(m, f32(x[at(base, r)]));
    }
    part[li] = m;
{{ tree.fold(WG, steps, "max({a}, {b})") }}
    workgroupBarrier();
    m = part[0];
    if (m == {{ lowest }}) {
        m = 0.0;
    }
    workgroupBarrier();
{% endif %}
    var s = {{ init }};
    for (var r = li; r < {{ R }}u; r += {{ WG }}u) {
        let v = {{ acc }}(x[at(base, r)]);
        s = combine(s, {{ element }});
    }
    part[li] = s;
{{ tree.fold(WG, steps, "combine({a}, {b})") }}
    if (li == 0u && o < {{ O }}u) {
        s = part[0];
        y[o] = {{ ot }}({{ finish }});
    }
{% endif %}
}
