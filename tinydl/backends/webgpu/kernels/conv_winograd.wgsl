{{ header }}
{% from "conv_store.wgsl" import store with context %}
// {{ label }}: 3x3 stride-1 convolution by Winograd F(2x2, 3x3).
// Input {{ N }}x{{ C }}x{{ IH }}x{{ IW }} ({{ in_layout }}), output {{ N }}x{{ OC }}x{{ OH }}x{{ OW }} ({{ out_mode }}), pad {{ PT }},{{ PL }}.
// A workgroup makes {{ TTX }}x{{ TTY }} tiles of 2x2 output pixels for {{ OCB }} output channels. Per chunk
// of {{ CK }} input channels it stages the input patch, transforms it (V = Bt d B, one tile and
// channel per thread) and multiplies: for each of the 16 transform points, M[tile][oc] +=
// V[tile][ic] U[ic][oc] with U = G g Gt packed by the host. Each thread owns one point, {{ RT }} tiles
// and {{ RO }} vec4 of output channels. At the end M goes back through workgroup memory in
// {{ RO * NH }} passes, and Y = At M A, the bias and the activations are applied per 2x2 tile.
@group(0) @binding(0) var<storage, read> x: array<{{ "vec4<" ~ st ~ ">" if in_layout == "nc4hw4" else st }}>;
@group(0) @binding(1) var<storage, read> u: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> chan: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ "vec4<" ~ ot ~ ">" if out_mode == "nc4hw4" else ot }}>;

const PH: u32 = {{ PH }}u;
const PW: u32 = {{ PW }}u;
const TT4: u32 = {{ TT // 4 }}u;
const OCB4: u32 = {{ OCB // 4 }}u;
var<workgroup> tin: array<f32, {{ CK * PH * PW }}>;
// V[point][ic][tile] (vec4 of 4 tiles); after the loop, M passes through it.
var<workgroup> vs: array<vec4<f32>, {{ 16 * CK * TT // 4 }}>;
// U[point][ic][oc] (vec4 of 4 output channels).
var<workgroup> us: array<vec4<f32>, {{ 16 * CK * OCB // 4 }}>;

@compute @workgroup_size({{ THREADS }}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let n = wid.z / {{ NOCB }}u;
    let ocb = wid.z % {{ NOCB }}u;
    let oy0 = wid.y * {{ 2 * TTY }}u;
    let ox0 = wid.x * {{ 2 * TTX }}u;
    let iy0 = i32(oy0) - {{ PT }};
    let ix0 = i32(ox0) - {{ PL }};
    // This thread's transform point, tile block and output-channel block.
    let xi = li / {{ S }}u;
    let sub = li % {{ S }}u;
    let tb = sub % {{ NTB }}u;
    let ob = sub / {{ NTB }}u;
{% for t in range(RT) %}{% for k in range(RO) %}
    var a{{ t }}_{{ k }} = vec4<f32>(0.0);
{% endfor %}{% endfor %}
    for (var ch = 0u; ch < {{ NCHUNK }}u; ch++) {
        workgroupBarrier();
{% if in_layout == "nc4hw4" %}
        for (var e = li; e < {{ PH * PW * CK // 4 }}u; e += {{ THREADS }}u) {
            let col = e % PW;
            let row = (e / PW) % PH;
            let cl = e / {{ PW * PH }}u;
            let iy = iy0 + i32(row);
            let ix = ix0 + i32(col);
            let c4 = ch * {{ CK // 4 }}u + cl;
            var v = vec4<f32>(0.0);
            if (iy >= 0 && iy < {{ IH }} && ix >= 0 && ix < {{ IW }} && c4 < {{ C4 }}u) {
                v = vec4<f32>(x[((n * {{ C4 }}u + c4) * {{ IH }}u + u32(iy)) * {{ IW }}u + u32(ix)]);
            }
            let pi = (cl * 4u * PH + row) * PW + col;
{% for j in range(4) %}
            tin[pi + {{ j * PH * PW }}u] = v[{{ j }}];
{% endfor %}
        }
{% else %}
        for (var e = li; e < {{ PH * PW * CK }}u; e += {{ THREADS }}u) {
            let col = e % PW;
            let row = (e / PW) % PH;
            let cl = e / {{ PW * PH }}u;
            let iy = iy0 + i32(row);
            let ix = ix0 + i32(col);
            let c = ch * {{ CK }}u + cl;
            var v = 0.0;
            if (iy >= 0 && iy < {{ IH }} && ix >= 0 && ix < {{ IW }} && c < {{ C }}u) {
                v = f32(x[((n * {{ C }}u + c) * {{ IH }}u + u32(iy)) * {{ IW }}u + u32(ix)]);
            }
            tin[e] = v;
        }
{% endif %}
        let ubase = (ocb * {{ NCHUNK }}u + ch) * {{ 16 * CK * OCB // 4 }}u;
        for (var e = li; e < {{ 16 * CK * OCB // 4 }}u; e += {{ THREADS }}u) {
            us[e] = u[ubase + e];
        }
        workgroupBarrier();
        // Input transform: one (tile, input channel) per thread.
        for (var e = li; e < {{ TT * CK }}u; e += {{ THREADS }}u) {
            let tile = e % {{ TT }}u;
            let cl = e / {{ TT }}u;
            let p0 = (cl * PH + (tile / {{ TTX }}u) * 2u) * PW + (tile % {{ TTX }}u) * 2u;
{% for i in range(4) %}
            let d{{ i }} = vec4<f32>(tin[p0 + {{ i * PW }}u], tin[p0 + {{ i * PW + 1 }}u], tin[p0 + {{ i * PW + 2 }}u], tin[p0 + {{ i * PW + 3 }}u]);
{% endfor %}
            // Bt d (rows), then (Bt d) B (columns).
            let r0 = d0 - d2;
            let r1 = d1 + d2;
            let r2 = d2 - d1;
            let r3 = d1 - d3;
            let vi = cl * TT4 + tile / 4u;
            let lane = tile % 4u;
{% for i in range(4) %}
            vs[{{ (i * 4 + 0) * CK * TT // 4 }}u + vi][lane] = r{{ i }}.x - r{{ i }}.z;
            vs[{{ (i * 4 + 1) * CK * TT // 4 }}u + vi][lane] = r{{ i }}.y + r{{ i }}.z;
            vs[{{ (i * 4 + 2) * CK * TT // 4 }}u + vi][lane] = r{{ i }}.z - r{{ i }}.y;
            vs[{{ (i * 4 + 3) * CK * TT // 4 }}u + vi][lane] = r{{ i }}.y - r{{ i }}.w;
{% endfor %}
        }
        workgroupBarrier();
        // 16 small matrix products, one point per thread.
        if (xi < 16u) {
            for (var ic = 0u; ic < {{ CK }}u; ic++) {
                let vb = (xi * {{ CK }}u + ic) * TT4 + tb * {{ RT // 4 }}u;
                let ub = (xi * {{ CK }}u + ic) * OCB4 + ob * {{ RO }}u;
{% for q in range(RT // 4) %}
                let v{{ q }} = vs[vb + {{ q }}u];
{% endfor %}
{% for k in range(RO) %}
                let w{{ k }} = us[ub + {{ k }}u];
{% endfor %}
{% for t in range(RT) %}{% for k in range(RO) %}
                a{{ t }}_{{ k }} = fma(vec4<f32>(v{{ t // 4 }}[{{ t % 4 }}]), w{{ k }}, a{{ t }}_{{ k }});
{% endfor %}{% endfor %}
            }
        }
    }
    // Output transform in passes: M for RT/NH of each thread's tiles and one of its vec4 of
    // output channels goes through vs, then one (tile, vec4 of channels) per thread.
{% for k in range(RO) %}{% for h in range(NH) %}
    workgroupBarrier();
    if (xi < 16u) {
{% for j in range(RT // NH) %}
        vs[(xi * {{ TT // NH }}u + tb * {{ RT // NH }}u + {{ j }}u) * {{ NOB }}u + ob] = a{{ h * (RT // NH) + j }}_{{ k }};
{% endfor %}
    }
    workgroupBarrier();
    for (var e = li; e < {{ (TT // NH) * NOB }}u; e += {{ THREADS }}u) {
        let s = e / {{ NOB }}u;
        let obi = e % {{ NOB }}u;
        let tile = (s / {{ RT // NH }}u) * {{ RT }}u + {{ h * (RT // NH) }}u + s % {{ RT // NH }}u;
        let oc4 = ocb * OCB4 + obi * {{ RO }}u + {{ k }}u;
{% for i in range(16) %}
        let m{{ i }} = vs[({{ i * (TT // NH) }}u + s) * {{ NOB }}u + obi];
{% endfor %}
        // At M (rows), then (At M) A (columns).
{% for j in range(4) %}
        let t0{{ j }} = m{{ j }} + m{{ 4 + j }} + m{{ 8 + j }};
        let t1{{ j }} = m{{ 4 + j }} - m{{ 8 + j }} - m{{ 12 + j }};
{% endfor %}
        let bias = chan[min(oc4, {{ OC4 - 1 }}u)];
{% if has_slope %}
        let slope = chan[{{ OC4 }}u + min(oc4, {{ OC4 - 1 }}u)];
{% endif %}
        let oy = oy0 + (tile / {{ TTX }}u) * 2u;
        let ox = ox0 + (tile % {{ TTX }}u) * 2u;
{% for i in range(2) %}
        {
            var r = t{{ i }}0 + t{{ i }}1 + t{{ i }}2 + bias;
{% for e in epilogue %}
            r = {{ e }};
{% endfor %}
{{ store("r", "ox", "oy + " ~ i ~ "u", "oc4") }}        }
        {
            var r = t{{ i }}1 - t{{ i }}2 - t{{ i }}3 + bias;
{% for e in epilogue %}
            r = {{ e }};
{% endfor %}
{{ store("r", "ox + 1u", "oy + " ~ i ~ "u", "oc4") }}        }
{% endfor %}
    }
{% endfor %}{% endfor %}
}
