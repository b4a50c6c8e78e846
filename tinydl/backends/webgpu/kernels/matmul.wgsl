{{ header }}
// {{ label }}: {{ B }} x ({{ M }}x{{ K }} @ {{ K }}x{{ N }}), tiled: a workgroup of 8x8 threads makes a
// 32x32 block of the output, each thread 4x4, through 16-deep tiles of A and B in workgroup memory.
@group(0) @binding(0) var<storage, read> a: array<{{ at }}>;
@group(0) @binding(1) var<storage, read> b: array<{{ bt }}>;
@group(0) @binding(2) var<storage, read> batch: array<i32>;
{% if has_c %}
@group(0) @binding(3) var<storage, read> c: array<{{ ctype_c }}>;
{% endif %}
@group(0) @binding({{ 4 if has_c else 3 }}) var<storage, read_write> y: array<{{ ot }}>;

var<workgroup> ta: array<vec4<f32>, 128>;  // [k 16][m 32 / 4]
var<workgroup> tb: array<vec4<f32>, 128>;  // [k 16][n 32 / 4]

@compute @workgroup_size(8, 8, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let bi = wid.z;
    let aoff = u32(batch[bi * 2u]);
    let boff = u32(batch[bi * 2u + 1u]);
    let m0 = wid.y * 32u;
    let n0 = wid.x * 32u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < {{ K }}u; k0 += 16u) {
        workgroupBarrier();
        // 512 values of A and of B: 8 per thread, as 2 vec4 of 4 rows (m) / columns (n).
        for (var e = li; e < 128u; e += 64u) {
            let kk = e / 8u;
            let q = e % 8u;
            let k = k0 + kk;
            var va = vec4<f32>(0.0);
            var vb = vec4<f32>(0.0);
            if (k < {{ K }}u) {
{% for j in range(4) %}
                {
                    let m = m0 + q * 4u + {{ j }}u;
                    if (m < {{ M }}u) { va[{{ j }}] = f32(a[aoff + m * {{ SAM }}u + k * {{ SAK }}u]); }
                    let n = n0 + q * 4u + {{ j }}u;
                    if (n < {{ N }}u) { vb[{{ j }}] = f32(b[boff + k * {{ SBK }}u + n * {{ SBN }}u]); }
                }
{% endfor %}
            }
            ta[e] = va;
            tb[e] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            let av = ta[kk * 8u + lid.y];
            let bv = tb[kk * 8u + lid.x];
            acc0 = fma(vec4<f32>(av.x), bv, acc0);
            acc1 = fma(vec4<f32>(av.y), bv, acc1);
            acc2 = fma(vec4<f32>(av.z), bv, acc2);
            acc3 = fma(vec4<f32>(av.w), bv, acc3);
        }
    }
    let n = n0 + lid.x * 4u;
{% for i in range(4) %}
    {
        let m = m0 + lid.y * 4u + {{ i }}u;
        let r = acc{{ i }} * {{ alpha }};
        if (m < {{ M }}u) {
{% for j in range(4) %}
            if (n + {{ j }}u < {{ N }}u) {
{% if has_c %}
                let cv = {{ beta }} * f32(c[m * {{ SCM }}u + (n + {{ j }}u) * {{ SCN }}u]);
{% else %}
                let cv = 0.0;
{% endif %}
                y[(bi * {{ M }}u + m) * {{ N }}u + n + {{ j }}u] = {{ ot }}(r[{{ j }}] + cv);
            }
{% endfor %}
        }
    }
{% endfor %}
}
