{{ header }}
{% from "conv_store.wgsl" import store with context %}
// {{ label }}: direct convolution, register-blocked.
// Input {{ N }}x{{ C }}x{{ IH }}x{{ IW }} ({{ in_layout }}), output {{ N }}x{{ OC }}x{{ OH }}x{{ OW }} ({{ out_mode }}),
// kernel {{ KH }}x{{ KW }}, stride {{ SH }}x{{ SW }}, dilation {{ DH }}x{{ DW }}, pad {{ PT }},{{ PL }}.
// A workgroup of {{ TX }}x{{ TY }} threads makes a {{ TW }}x{{ TH }} output tile for {{ 4 * OCV }} output
// channels; each thread makes {{ PY }} pixels of one column x {{ OCV }} vec4 of channels. Input
// channels go through workgroup memory {{ 4 * CC4 }} at a time, with the weights of the chunk.
{% if KS > 1 %}
// Split over the input channels: {{ KS }} slices of threads (lid.z) take every {{ KS }}th chunk,
// each with its own tiles; slice 0 adds the others' sums and stores.
{% endif %}
{% set cvec = "vec4<" ~ ct ~ ">" %}
{% if scalar_in %}{% set tin_t = ct %}{% else %}{% set tin_t = cvec %}{% endif %}
@group(0) @binding(0) var<storage, read> x: array<{{ "vec4<" ~ st ~ ">" if in_layout == "nc4hw4" else st }}>;
@group(0) @binding(1) var<storage, read> w: array<vec4<{{ wt }}>>;
@group(0) @binding(2) var<storage, read> chan: array<vec4<f32>>;
{% if store_y %}
@group(0) @binding(3) var<storage, read_write> y: array<{{ "vec4<" ~ ot ~ ">" if out_mode == "nc4hw4" else ot }}>;
{% endif %}
{% if residual %}
// The residual: a value of the output's shape ({{ res_layout }}) added after the epilogue{% if RC < OC %};
// it has {{ RC }} channels, the rest are zeros (a Pad that added channels, folded in){% endif %}{% if RK > 1 %};
// read through a {{ RK }}x{{ RK }} max pool of stride {{ RK }} (folded in) from {{ RH }}x{{ RW }}{% endif %}.
@group(0) @binding(4) var<storage, read> res: array<{{ "vec4<" ~ rt ~ ">" if res_layout == "nc4hw4" else rt }}>;

fn res_load(n: u32, oc4: u32, ry: u32, rx: u32) -> vec4<f32> {
{% if res_layout == "nc4hw4" %}
{% if RC < OC and RC % 4 %}
    let v = vec4<f32>(res[((n * {{ RC4 }}u + oc4) * {{ RH }}u + ry) * {{ RW }}u + rx]);
    if (oc4 == {{ RC4 - 1 }}u) {
        return vec4<f32>({% for j in range(4) %}{{ "v." ~ "xyzw"[j] if j < RC % 4 else "0.0" }}{{ ", " if not loop.last }}{% endfor %});
    }
    return v;
{% else %}
    return vec4<f32>(res[((n * {{ RC4 }}u + oc4) * {{ RH }}u + ry) * {{ RW }}u + rx]);
{% endif %}
{% else %}
    var v = vec4<f32>(0.0);
{% for j in range(4) %}
    if (oc4 * 4u + {{ j }}u < {{ RC }}u) {
        v[{{ j }}] = f32(res[((n * {{ RC }}u + oc4 * 4u + {{ j }}u) * {{ RH }}u + ry) * {{ RW }}u + rx]);
    }
{% endfor %}
    return v;
{% endif %}
}

fn residual_at(n: u32, oc4: u32, oy: u32, ox: u32) -> vec4<f32> {
    if (ox >= {{ OW }}u || oy >= {{ OH }}u || oc4 >= {{ RC4 }}u) {
        return vec4<f32>(0.0);
    }
{% if RK > 1 %}
    var v = res_load(n, oc4, oy * {{ RK }}u, ox * {{ RK }}u);
{% for t in range(1, RK * RK) %}
    v = max(v, res_load(n, oc4, oy * {{ RK }}u + {{ t // RK }}u, ox * {{ RK }}u + {{ t % RK }}u));
{% endfor %}
    return v;
{% else %}
    return res_load(n, oc4, oy, ox);
{% endif %}
}
{% endif %}

{% if dw %}
// The input tile is a depthwise convolution's output, computed as it is staged: its input
// {{ N }}x{{ C }}x{{ XH }}x{{ XW }} ({{ in_layout }}), kernel {{ DKH }}x{{ DKW }}, stride {{ DSH }}x{{ DSW }}, dilation {{ DDH }}x{{ DDW }}, pad {{ DPT }},{{ DPL }};
// its weights as vec4 of channels per tap, then its bias.
@group(0) @binding({{ dw_binding }}) var<storage, read> dw: array<vec4<f32>>;

fn dw_in(n: u32, c4: u32, iy: i32, ix: i32) -> vec4<f32> {
    if (iy < 0 || iy >= {{ XH }} || ix < 0 || ix >= {{ XW }}) {
        return vec4<f32>(0.0);
    }
{% if in_layout == "nc4hw4" %}
    return vec4<f32>(x[((n * {{ C4 }}u + c4) * {{ XH }}u + u32(iy)) * {{ XW }}u + u32(ix)]);
{% else %}
    let base = (n * {{ C }}u + c4 * 4u) * {{ XH * XW }}u + u32(iy) * {{ XW }}u + u32(ix);
    var v = vec4<f32>(0.0);
{% for j in range(4) %}
    if (c4 * 4u + {{ j }}u < {{ C }}u) { v[{{ j }}] = f32(x[base + {{ j * XH * XW }}u]); }
{% endfor %}
    return v;
{% endif %}
}

fn depthwise(n: u32, c4: u32, oy: u32, ox: u32) -> vec4<f32> {
    let iy = i32(oy * {{ DSH }}u) - {{ DPT }};
    let ix = i32(ox * {{ DSW }}u) - {{ DPL }};
    let wb = c4 * {{ DKH * DKW }}u;
    var r = dw[{{ C4 * DKH * DKW }}u + c4];
{% for ky in range(DKH) %}{% for kx in range(DKW) %}
    r = fma(dw[wb + {{ ky * DKW + kx }}u], dw_in(n, c4, iy + {{ ky * DDH }}, ix + {{ kx * DDW }}), r);
{% endfor %}{% endfor %}
{% for e in dw_epilogue %}
    r = {{ e }};
{% endfor %}
    return r;
}
{% endif %}

{% if dwa %}
// Then a depthwise convolution of this output ({{ AH }}x{{ AW }} -> {{ ZH }}x{{ ZW }}, kernel {{ AKH }}x{{ AKW }},
// stride {{ ASH }}x{{ ASW }}, dilation {{ ADH }}x{{ ADW }}, pad {{ APT }},{{ APL }}): the workgroup's tile is the whole
// image, so its {{ 4 * OCV }} channels wait in workgroup memory ({{ "stored as well" if store_y else "not stored" }}) and the
// workgroup computes their depthwise output ({{ z_mode }}) from there. Its weights as vec4 of
// channels per tap, then its bias.
@group(0) @binding({{ dwa_binding }}) var<storage, read> dwa: array<vec4<f32>>;
@group(0) @binding({{ z_binding }}) var<storage, read_write> z: array<{{ "vec4<" ~ zt ~ ">" if z_mode == "nc4hw4" else zt }}>;
var<workgroup> yimg: array<vec4<f32>, {{ OCV * OH * OW }}>;
{% endif %}

const TIH: u32 = {{ TIH }}u;
const TIW: u32 = {{ TIW }}u;
const TILE_IN: u32 = {{ TIH * TIW * CC4 }}u;
const TILE_W: u32 = {{ WCHUNK }}u;
var<workgroup> tin: array<{{ tin_t }}, {{ TIH * TIW * CC4 * KS }}>;
var<workgroup> tw: array<{{ cvec }}, {{ WCHUNK * KS }}>;
{% if KS > 1 %}
var<workgroup> red: array<{{ cvec }}, {{ (KS - 1) * TX * TY * PY * OCV }}>;
{% endif %}
{% set TB = "tb + " if KS > 1 else "" %}
{% set WB = "wb + " if KS > 1 else "" %}

{#- The taps of input vec4 `cl` of the chunk (a number, or none in the loop over them): every kx,
    ky, output vec4 and row. Unrolled, the input values of a column are loaded once for every
    ky; with loop_ky, ky is a loop and each step loads its PY rows. -#}
{% macro taps(cl) %}
{% set cle = "cl" if cl is none else cl ~ "u" %}
{% set sfx = "" if cl is none else cl ~ "_" %}
{% for kx in range(KW) %}
{% if loop_ky %}
        for (var ky = 0u; ky < {{ KH }}u; ky++) {
{% for p in range(PY) %}
            let xr{{ p }} = tin[{{ TB }}({{ cle }} * TIH + rbase + {{ p * SH }}u + ky * {{ DH }}u) * TIW + cbase + {{ kx * DW }}u];
{% endfor %}
{% for v in range(OCV) %}
{{ block(cl, none, kx, v, "xr") -}}
{% endfor %}
        }
{% else %}
{% for r in rows %}
        let x{{ sfx }}{{ kx }}_{{ r }} = tin[{{ TB }}({{ cle }} * TIH + rbase + {{ r }}u) * TIW + cbase + {{ kx * DW }}u];
{% endfor %}
{% for ky in range(KH) %}
{% for v in range(OCV) %}
{{ block(cl, ky, kx, v, "x" ~ sfx ~ kx ~ "_") -}}
{% endfor %}
{% endfor %}
{% endif %}
{% endfor %}
{% endmacro %}
{#- One output vec4 `v` of one tap: PY fma chains. `cl` and `ky` numbers, or none where they are
    the loops' variables (the input values then named by p: xr0, xr1, ...). -#}
{% macro block(cl, ky, kx, v, xs) %}
        {
{% if scalar_in %}
{% if ky is none %}
            let wv = tw[(ky * {{ KW }}u + {{ kx }}u) * {{ OCV }}u + {{ v }}u];
{% else %}
            let wv = tw[{{ (ky * KW + kx) * OCV + v }}u];
{% endif %}
{% for p in range(PY) %}
            a{{ p }}_{{ v }} = fma(wv, {{ cvec }}({{ xs }}{{ p if ky is none else p * SH + ky * DH }}), a{{ p }}_{{ v }});
{% endfor %}
{% else %}
{% if cl is none or ky is none %}
            let wi = ((({{ "cl" if cl is none else cl ~ "u" }} * {{ KH }}u + {{ "ky" if ky is none else ky ~ "u" }}) * {{ KW }}u + {{ kx }}u) * {{ OCV }}u + {{ v }}u) * 4u;
{% else %}
            let wi = {{ (((cl * KH + ky) * KW + kx) * OCV + v) * 4 }}u;
{% endif %}
            let w0 = tw[{{ WB }}wi];
            let w1 = tw[{{ WB }}wi + 1u];
            let w2 = tw[{{ WB }}wi + 2u];
            let w3 = tw[{{ WB }}wi + 3u];
{% for p in range(PY) %}
{% set xv = xs ~ (p if ky is none else p * SH + ky * DH) %}
            a{{ p }}_{{ v }} = fma(w3, {{ cvec }}({{ xv }}.w), fma(w2, {{ cvec }}({{ xv }}.z), fma(w1, {{ cvec }}({{ xv }}.y), fma(w0, {{ cvec }}({{ xv }}.x), a{{ p }}_{{ v }}))));
{% endfor %}
{% endif %}
        }
{% endmacro %}

@compute @workgroup_size({{ TX }}, {{ TY }}, {{ KS }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let n = wid.z / {{ NOCB }}u;
    let ocb = wid.z % {{ NOCB }}u;
    let oy0 = wid.y * {{ TH }}u;
    let ox0 = wid.x * {{ TW }}u;
    let iy0 = i32(oy0 * {{ SH }}u) - {{ PT }};
    let ix0 = i32(ox0 * {{ SW }}u) - {{ PL }};
    let tx = lid.x;
    let ty = lid.y;
{% for p in range(PY) %}{% for v in range(OCV) %}
    var a{{ p }}_{{ v }} = {{ cvec }}(0.0);
{% endfor %}{% endfor %}
{% if KS > 1 %}
    let kz = lid.z;
    let lt = lid.y * {{ TX }}u + lid.x;  // the thread's place in its slice
    let tb = kz * TILE_IN;  // the slice's input tile ...
    let wb = kz * TILE_W;  // ... and weights
{% set LT = "lt" %}
{% else %}
{% set LT = "li" %}
{% endif %}
    for (var it = 0u; it < {{ NITER }}u; it++) {
        let ch = it{{ (" * " ~ KS ~ "u + kz") if KS > 1 }};
        workgroupBarrier();
        for (var e = {{ LT }}; e < TILE_IN; e += {{ TX * TY }}u) {
            let col = e % TIW;
            let row = (e / TIW) % TIH;
            let cl = e / {{ TIW * TIH }}u;
            let iy = iy0 + i32(row);
            let ix = ix0 + i32(col);
            let c4 = ch * {{ CC4 }}u + cl;
            var v = {{ tin_t }}(0.0);
            if (iy >= 0 && iy < {{ IH }} && ix >= 0 && ix < {{ IW }} && c4 < {{ C4 }}u) {
{% if dw %}
                v = {{ tin_t }}(depthwise(n, c4, u32(iy), u32(ix)));
{% elif scalar_in %}
                v = {{ ct }}(x[(n * {{ IH }}u + u32(iy)) * {{ IW }}u + u32(ix)]);
{% elif in_layout == "nc4hw4" %}
                v = {{ cvec }}(x[((n * {{ C4 }}u + c4) * {{ IH }}u + u32(iy)) * {{ IW }}u + u32(ix)]);
{% elif in_layout == "nhwc" %}
                let base = ((n * {{ IH }}u + u32(iy)) * {{ IW }}u + u32(ix)) * {{ C }}u + c4 * 4u;
{% for j in range(4) %}
                if (c4 * 4u + {{ j }}u < {{ C }}u) { v[{{ j }}] = {{ ct }}(x[base + {{ j }}u]); }
{% endfor %}
{% else %}
                let base = (n * {{ C }}u + c4 * 4u) * {{ IH * IW }}u + u32(iy) * {{ IW }}u + u32(ix);
{% for j in range(4) %}
                if (c4 * 4u + {{ j }}u < {{ C }}u) { v[{{ j }}] = {{ ct }}(x[base + {{ j * IH * IW }}u]); }
{% endfor %}
{% endif %}
            }
            tin[{{ TB }}(cl * TIH + row) * TIW + col] = v;
        }
        let wbase = (ocb * {{ NCHUNK }}u + ch) * TILE_W;
        for (var e = {{ LT }}; e < TILE_W; e += {{ TX * TY }}u) {
{% if KS > 1 and NITER * KS > NCHUNK %}
            tw[wb + e] = select({{ cvec }}(0.0), {{ cvec }}(w[wbase + e]), ch < {{ NCHUNK }}u);
{% else %}
            tw[{{ WB }}e] = {{ cvec }}(w[wbase + e]);
{% endif %}
        }
        workgroupBarrier();
        let rbase = ty * {{ PY * SH }}u;
        let cbase = tx * {{ SW }}u;
{% if loop_cl %}
        // The chunk's input vec4 in a loop (an unrolled body this large compiles slowly)
        for (var cl = 0u; cl < {{ CC4 }}u; cl++) {
{{ taps(none) -}}
        }
{% else %}
{% for cl in range(CC4) %}
{{ taps(cl) -}}
{% endfor %}
{% endif %}
    }
{% if KS > 1 %}
    if (kz > 0u) {
{% for p in range(PY) %}{% for v in range(OCV) %}
        red[((kz - 1u) * {{ PY * OCV }}u + {{ p * OCV + v }}u) * {{ TX * TY }}u + lt] = a{{ p }}_{{ v }};
{% endfor %}{% endfor %}
    }
    workgroupBarrier();
{% if dwa %}
    if (kz == 0u) {  // (no return: the whole workgroup meets the barrier before the depthwise)
{% else %}
    if (kz > 0u) {
        return;
    }
{% endif %}
    for (var k = 0u; k < {{ KS - 1 }}u; k++) {
{% for p in range(PY) %}{% for v in range(OCV) %}
        a{{ p }}_{{ v }} += red[(k * {{ PY * OCV }}u + {{ p * OCV + v }}u) * {{ TX * TY }}u + lt];
{% endfor %}{% endfor %}
    }
{% endif %}
    let ox = ox0 + tx;
{% for v in range(OCV) %}
    {
        let oc4 = ocb * {{ OCV }}u + {{ v }}u;
        let bias = chan[min(oc4, {{ OC4 - 1 }}u)];
{% if has_slope %}
        let slope = chan[{{ OC4 }}u + min(oc4, {{ OC4 - 1 }}u)];
{% endif %}
{% for p in range(PY) %}
        {
            let oy = oy0 + ty * {{ PY }}u + {{ p }}u;
            var r = vec4<f32>(a{{ p }}_{{ v }}) + bias;
{% for e in epilogue %}
            r = {{ e }};
{% endfor %}
{% if residual %}
            r = r + residual_at(n, oc4, oy, ox);
{% for e in post %}
            r = {{ e }};
{% endfor %}
{% endif %}
{% if store_y %}
{{ store("r", "ox", "oy", "oc4") }}{% endif %}
{% if dwa %}
            if (ox < {{ OW }}u && oy < {{ OH }}u) {
                yimg[({{ v }}u * {{ OH }}u + oy) * {{ OW }}u + ox] = r;
            }
{% endif %}
        }
{% endfor %}
    }
{% endfor %}
{% if dwa %}
{% if KS > 1 %}
    }
{% endif %}
    workgroupBarrier();
    for (var e = li; e < {{ OCV * ZH * ZW }}u; e += {{ TX * TY * KS }}u) {
        let v = e / {{ ZH * ZW }}u;
        let zy = (e / {{ ZW }}u) % {{ ZH }}u;
        let zx = e % {{ ZW }}u;
        let oc4 = ocb * {{ OCV }}u + v;
        if (oc4 < {{ OC4 }}u) {
            let iy = i32(zy * {{ ASH }}u) - {{ APT }};
            let ix = i32(zx * {{ ASW }}u) - {{ APL }};
            var r = dwa[{{ OC4 * AKH * AKW }}u + oc4];
{% for ky in range(AKH) %}{% for kx in range(AKW) %}
            {
                let yy = iy + {{ ky * ADH }};
                let xx = ix + {{ kx * ADW }};
                if (yy >= 0 && yy < {{ OH }} && xx >= 0 && xx < {{ OW }}) {
                    r = fma(dwa[oc4 * {{ AKH * AKW }}u + {{ ky * AKW + kx }}u], yimg[(v * {{ OH }}u + u32(yy)) * {{ OW }}u + u32(xx)], r);
                }
            }
{% endfor %}{% endfor %}
{% for e in dwa_epilogue %}
            r = {{ e }};
{% endfor %}
{% if z_mode == "nc4hw4" %}
            z[((n * {{ OC4 }}u + oc4) * {{ ZH }}u + zy) * {{ ZW }}u + zx] = vec4<{{ zt }}>(r);
{% else %}
{% for j in range(4) %}
            if (oc4 * 4u + {{ j }}u < {{ OC }}u) {
                z[((n * {{ OC }}u + oc4 * 4u + {{ j }}u) * {{ ZH }}u + zy) * {{ ZW }}u + zx] = {{ zt }}(r[{{ j }}]);
            }
{% endfor %}
{% endif %}
        }
    }
{% endif %}
}
