{{ header }}
// {{ label }}: grouped / depthwise convolution, NCHW. Input {{ N }}x{{ C }}x{{ IH }}x{{ IW }},
// output {{ N }}x{{ OC }}x{{ OH }}x{{ OW }}, {{ CG }} input channels per group, kernel {{ KH }}x{{ KW }}.
// Each thread makes 4 adjacent output pixels of one channel; a workgroup shares the channel,
// so its weights are uniform loads, and the input columns are loaded once for all kx taps.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
{% if uniform_w %}
// The weights are few: a uniform buffer (constant memory), read alike by the whole workgroup.
@group(0) @binding(1) var<uniform> w: array<vec4<f32>, {{ NW4 }}>;
fn weight(i: u32) -> f32 { return w[i / 4u][i % 4u]; }
{% else %}
@group(0) @binding(1) var<storage, read> w: array<f32>;
fn weight(i: u32) -> f32 { return w[i]; }
{% endif %}
@group(0) @binding(2) var<storage, read> chan: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ ot }}>;

fn load(base: u32, iy: i32, ix: i32) -> f32 {
    if (iy < 0 || iy >= {{ IH }} || ix < 0 || ix >= {{ IW }}) {
        return 0.0;
    }
    return f32(x[base + u32(iy) * {{ IW }}u + u32(ix)]);
}

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let oxs = (wid.x * {{ WG }}u + li) * 4u;
    let oy = wid.y;
    let n = wid.z / {{ OC }}u;
    let oc = wid.z % {{ OC }}u;
    let g = oc / {{ MG }}u;
    let ix0 = i32(oxs * {{ SW }}u) - {{ PL }};
    var acc = vec4<f32>(0.0);
    for (var i = 0u; i < {{ CG }}u; i++) {
        let c = g * {{ CG }}u + i;
        let base = (n * {{ C }}u + c) * {{ IH * IW }}u;
        let wb = (oc * {{ CG }}u + i) * {{ KH * KW }}u;
{% for ky in range(KH) %}
        {
            let iy = i32(oy * {{ SH }}u) - {{ PT }} + {{ ky * DH }};
{% for o in cols %}
            let v{{ o }} = load(base, iy, ix0 + {{ o }});
{% endfor %}
{% for kx in range(KW) %}
            {
                let wk = weight(wb + {{ ky * KW + kx }}u);
                acc = fma(vec4<f32>(wk), vec4<f32>({% for p in range(4) %}v{{ p * SW + kx * DW }}{{ ", " if not loop.last }}{% endfor %}), acc);
            }
{% endfor %}
        }
{% endfor %}
    }
    var r = acc + vec4<f32>(chan[oc]);
{% if has_slope %}
    let slope = vec4<f32>(chan[{{ OC }}u + oc]);
{% endif %}
{% for e in epilogue %}
    r = {{ e }};
{% endfor %}
    if (oy < {{ OH }}u) {
        let ob = ((n * {{ OC }}u + oc) * {{ OH }}u + oy) * {{ OW }}u;
{% for p in range(4) %}
        if (oxs + {{ p }}u < {{ OW }}u) { y[ob + oxs + {{ p }}u] = {{ ot }}(r[{{ p }}]); }
{% endfor %}
    }
}
