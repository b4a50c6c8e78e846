{{ header }}
{% set NT = BQ * TPR %}
{% set DP = D + 1 %}
// {{ label }}: softmax({{ scale }} * Q.K^T{{ " + mask" if MS else "" }}).V for {{ B }}x{{ H }} (batch, head) pairs of
// {{ M }} queries x {{ N }} keys, head dims {{ D }} (Q, K) and {{ DV }} (V). A workgroup takes {{ BQ }} query rows of
// one pair, {{ TPR }} threads per row, and walks the keys in blocks of {{ BK }} staged in workgroup memory with
// an online softmax: the running max and sum of each row rescale its f32 accumulators.
@group(0) @binding(0) var<storage, read> q: array<{{ qt }}>;
@group(0) @binding(1) var<storage, read> k: array<{{ kt }}>;
@group(0) @binding(2) var<storage, read> v: array<{{ vt }}>;
{% if MS %}
@group(0) @binding(3) var<storage, read> mask: array<{{ mt }}>;
{% endif %}
@group(0) @binding({{ 4 if MS else 3 }}) var<storage, read_write> y: array<{{ ot }}>;

var<workgroup> qs: array<f32, {{ BQ * DP }}>;  // [row][d], scaled
var<workgroup> ks: array<f32, {{ BK * DP }}>;  // [key][d]
var<workgroup> vs: array<f32, {{ BK * DV }}>;  // [key][column]
var<workgroup> ps: array<f32, {{ BQ * (BK + 1) }}>;  // [row][key]: the block's scores

@compute @workgroup_size({{ NT }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let bh = wid.y;
    let bi = bh / {{ H }}u;
    let hi = bh % {{ H }}u;
    let q0 = wid.x * {{ BQ }}u;
    let r = li / {{ TPR }}u;
    let t = li % {{ TPR }}u;
    let row = q0 + r;
    let qb = bi * {{ Q[0] }}u + hi * {{ Q[1] }}u;
    let kb = bi * {{ K[0] }}u + hi * {{ K[1] }}u;
    let vb = bi * {{ V[0] }}u + hi * {{ V[1] }}u;
{% if MS %}
    let mb = bi * {{ MS[0] }}u + hi * {{ MS[1] }}u + min(row, {{ M - 1 }}u) * {{ MS[2] }}u;
{% endif %}
    for (var e = li; e < {{ BQ * D }}u; e += {{ NT }}u) {
        let rr = e / {{ D }}u;
        let d = e % {{ D }}u;
        var x = 0.0;
        if (q0 + rr < {{ M }}u) {
            x = f32(q[qb + (q0 + rr) * {{ Q[2] }}u + d * {{ Q[3] }}u]) * {{ scale }};
        }
        qs[rr * {{ DP }}u + d] = x;
    }
    var m = -3.40282347e+38;
    var l = 0.0;
    var acc: array<f32, {{ CPT }}>;
    for (var k0 = 0u; k0 < {{ N }}u; k0 += {{ BK }}u) {
        let kn = min({{ BK }}u, {{ N }}u - k0);
        workgroupBarrier();
        for (var e = li; e < {{ BK * D }}u; e += {{ NT }}u) {
{% if k_key_fast %}
            let j = e % {{ BK }}u;
            let d = e / {{ BK }}u;
{% else %}
            let j = e / {{ D }}u;
            let d = e % {{ D }}u;
{% endif %}
            var x = 0.0;
            if (j < kn) { x = f32(k[kb + d * {{ K[2] }}u + (k0 + j) * {{ K[3] }}u]); }
            ks[j * {{ DP }}u + d] = x;
        }
        for (var e = li; e < {{ BK * DV }}u; e += {{ NT }}u) {
            let j = e / {{ DV }}u;
            let c = e % {{ DV }}u;
            var x = 0.0;
            if (j < kn) { x = f32(v[vb + (k0 + j) * {{ V[2] }}u + c * {{ V[3] }}u]); }
            vs[e] = x;
        }
        workgroupBarrier();
        // This thread's scores: keys t, t + TPR, ... of the block.
        for (var j = t; j < kn; j += {{ TPR }}u) {
            var s = 0.0;
            for (var d = 0u; d < {{ D }}u; d++) {
                s = fma(qs[r * {{ DP }}u + d], ks[j * {{ DP }}u + d], s);
            }
{% if MS %}
            s += f32(mask[mb + (k0 + j) * {{ MS[3] }}u]);
{% endif %}
            ps[r * {{ BK + 1 }}u + j] = s;
        }
        workgroupBarrier();
        // The row's new max; each of its threads then takes every exp it needs itself.
        var mx = m;
        for (var j = 0u; j < kn; j++) {
            mx = max(mx, ps[r * {{ BK + 1 }}u + j]);
        }
        let corr = exp(m - mx);
        m = mx;
        l *= corr;
        for (var c = 0u; c < {{ CPT }}u; c++) {
            acc[c] *= corr;
        }
        for (var j = 0u; j < kn; j++) {
            let p = exp(ps[r * {{ BK + 1 }}u + j] - mx);
            l += p;
            for (var c = 0u; c < {{ CPT }}u; c++) {
{% if DV % TPR %}
                let col = min(t + c * {{ TPR }}u, {{ DV - 1 }}u);
{% else %}
                let col = t + c * {{ TPR }}u;
{% endif %}
                acc[c] = fma(p, vs[j * {{ DV }}u + col], acc[c]);
            }
        }
    }
    if (row < {{ M }}u) {
        for (var c = 0u; c < {{ CPT }}u; c++) {
            let col = t + c * {{ TPR }}u;
            if (col < {{ DV }}u) {
                y[(bh * {{ M }}u + row) * {{ DV }}u + col] = {{ ot }}(acc[c] / l);
            }
        }
    }
}
