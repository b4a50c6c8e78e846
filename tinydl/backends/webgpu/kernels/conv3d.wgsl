{{ header }}
// {{ label }}: 3-D convolution, NCDHW. Input {{ N }}x{{ C }}x{{ ID }}x{{ IH }}x{{ IW }}, output
// {{ N }}x{{ OC }}x{{ OD }}x{{ OH }}x{{ OW }}, {{ CG }} input channels a group, kernel {{ KD }}x{{ KH }}x{{ KW }}.
// One output value a thread, the taps in loops (a video network's few 3-D layers; not tuned).
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> chan: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ ot }}>;

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
    let iz0 = i32(oz * {{ SD }}u) - {{ PF }};
    let iy0 = i32(oy * {{ SH }}u) - {{ PT }};
    let ix0 = i32(ox * {{ SW }}u) - {{ PL }};
    var acc = 0.0;
    for (var ci = 0u; ci < {{ CG }}u; ci++) {
        let xb = (n * {{ C }}u + g * {{ CG }}u + ci) * {{ ID * IH * IW }}u;
        let wb = (oc * {{ CG }}u + ci) * {{ KD * KH * KW }}u;
        for (var kz = 0u; kz < {{ KD }}u; kz++) {
            let iz = iz0 + i32(kz * {{ DD }}u);
            if (iz < 0 || iz >= {{ ID }}) {
                continue;
            }
            for (var ky = 0u; ky < {{ KH }}u; ky++) {
                let iy = iy0 + i32(ky * {{ DH }}u);
                if (iy < 0 || iy >= {{ IH }}) {
                    continue;
                }
                let row = xb + (u32(iz) * {{ IH }}u + u32(iy)) * {{ IW }}u;
                let wrow = wb + (kz * {{ KH }}u + ky) * {{ KW }}u;
                for (var kx = 0u; kx < {{ KW }}u; kx++) {
                    let ix = ix0 + i32(kx * {{ DW }}u);
                    if (ix >= 0 && ix < {{ IW }}) {
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
