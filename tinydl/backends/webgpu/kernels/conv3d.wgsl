{{ header }}
{% if transpose %}
// {{ label }}: 3-D transposed convolution, NCDHW, as a gather: output value (oz, oy, ox) sums
// the input values whose kernel tap lands on it.
{% else %}
// {{ label }}: 3-D convolution, NCDHW.
{% endif %}
// Input {{ N }}x{{ C }}x{{ ID }}x{{ IH }}x{{ IW }}, output {{ N }}x{{ OC }}x{{ OD }}x{{ OH }}x{{ OW }},
// {{ CG }} input and {{ MG }} output channels a group, kernel {{ KD }}x{{ KH }}x{{ KW }}.
// One output value a thread, the taps in loops (a video network's few 3-D layers; not tuned).
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> chan: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ ot }}>;

// The input index along an axis that tap k of an output at o reads, or -1 outside the input:
{% if transpose %}
// (o + pad - k * dilation) / stride, where that is a whole step.
fn src(o: u32, k: u32, pad: i32, dil: u32, stride: i32, size: i32) -> i32 {
    let t = i32(o) + pad - i32(k * dil);
    if (t < 0 || t % stride != 0 || t / stride >= size) {
        return -1;
    }
    return t / stride;
}
{% else %}
// o * stride - pad + k * dilation.
fn src(o: u32, k: u32, pad: i32, dil: u32, stride: i32, size: i32) -> i32 {
    let t = i32(o) * stride - pad + i32(k * dil);
    if (t < 0 || t >= size) {
        return -1;
    }
    return t;
}
{% endif %}

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ GX }}u + wid.x) * {{ WG }}u + lid;
    if (i >= {{ TOTAL }}u) {
        return;
    }
    var t = i;
    let ox = t % {{ OW }}u;
    t = t / {{ OW }}u;
    let oy = t % {{ OH }}u;
    t = t / {{ OH }}u;
    let oz = t % {{ OD }}u;
    t = t / {{ OD }}u;
    let oc = t % {{ OC }}u;
    let n = t / {{ OC }}u;
    let g = oc / {{ MG }}u;
    var acc = 0.0;
    for (var ci = 0u; ci < {{ CG }}u; ci++) {
        let c = g * {{ CG }}u + ci;
        let xb = (n * {{ C }}u + c) * {{ ID * IH * IW }}u;
{% if transpose %}
        let wb = (c * {{ MG }}u + oc % {{ MG }}u) * {{ KD * KH * KW }}u;  // weights [C][MG][kd][kh][kw]
{% else %}
        let wb = (oc * {{ CG }}u + ci) * {{ KD * KH * KW }}u;  // weights [OC][CG][kd][kh][kw]
{% endif %}
        for (var kz = 0u; kz < {{ KD }}u; kz++) {
            let iz = src(oz, kz, {{ PF }}, {{ DD }}u, {{ SD }}, {{ ID }});
            if (iz < 0) {
                continue;
            }
            for (var ky = 0u; ky < {{ KH }}u; ky++) {
                let iy = src(oy, ky, {{ PT }}, {{ DH }}u, {{ SH }}, {{ IH }});
                if (iy < 0) {
                    continue;
                }
                let row = xb + (u32(iz) * {{ IH }}u + u32(iy)) * {{ IW }}u;
                let wrow = wb + (kz * {{ KH }}u + ky) * {{ KW }}u;
                for (var kx = 0u; kx < {{ KW }}u; kx++) {
                    let ix = src(ox, kx, {{ PL }}, {{ DW }}u, {{ SW }}, {{ IW }});
                    if (ix >= 0) {
                        acc = fma(f32(x[row + u32(ix)]), w[wrow + kx], acc);
                    }
                }
            }
        }
    }
    var r = acc + chan[oc];
{% if has_slope %}
    let slope = chan[{{ OC }}u + oc];
{% endif %}
{% for e in epilogue %}
    r = {{ e }};
{% endfor %}
    y[i] = {{ ot }}(r);
}
