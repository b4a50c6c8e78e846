{{ header }}
// {{ label }}: transposed convolution, NCHW, as a gather: output pixel (oy, ox) sums the input
// pixels whose kernel tap lands on it. Input {{ N }}x{{ C }}x{{ IH }}x{{ IW }}, output
// {{ N }}x{{ OC }}x{{ OH }}x{{ OW }}; each thread makes one pixel x 4 output channels of a group.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> chan: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ ot }}>;

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let pix = wid.x * {{ WG }}u + li;
    let ox = pix % {{ OW }}u;
    let oy = pix / {{ OW }}u;
    let n = wid.z / {{ G * MG4 }}u;
    let g = (wid.z / {{ MG4 }}u) % {{ G }}u;
    let m4 = wid.z % {{ MG4 }}u;
    var acc = vec4<f32>(0.0);
    for (var i = 0u; i < {{ CG }}u; i++) {
        let c = g * {{ CG }}u + i;
        let base = (n * {{ C }}u + c) * {{ IH * IW }}u;
        let wb = ((g * {{ CG }}u + i) * {{ KH * KW }}u) * {{ MG4 }}u + m4;
{% for ky in range(KH) %}
        {
            let ty = i32(oy) + {{ PT - ky * DH }};
            let iy = ty / {{ SH }};
            if (ty >= 0 && ty % {{ SH }} == 0 && iy < {{ IH }}) {
{% for kx in range(KW) %}
                {
                    let tx = i32(ox) + {{ PL - kx * DW }};
                    let ix = tx / {{ SW }};
                    if (tx >= 0 && tx % {{ SW }} == 0 && ix < {{ IW }}) {
                        let v = f32(x[base + u32(iy) * {{ IW }}u + u32(ix)]);
                        acc = fma(w[wb + {{ (ky * KW + kx) * MG4 }}u], vec4<f32>(v), acc);
                    }
                }
{% endfor %}
            }
        }
{% endfor %}
    }
    let oc4 = g * {{ MG4 }}u + m4;
    var r = acc + chan[oc4];
{% if has_slope %}
    let slope = chan[{{ G * MG4 }}u + oc4];
{% endif %}
{% for e in epilogue %}
    r = {{ e }};
{% endfor %}
    if (oy < {{ OH }}u) {
{% for j in range(4) %}
        if (m4 * 4u + {{ j }}u < {{ MG }}u) {
            let oc = g * {{ MG }}u + m4 * 4u + {{ j }}u;
            y[((n * {{ OC }}u + oc) * {{ OH }}u + oy) * {{ OW }}u + ox] = {{ ot }}(r[{{ j }}]);
        }
{% endfor %}
    }
}
