{{ header }}
// {{ label }}: {{ total }} outputs, a thread per (roi, channel, bin row, bin column) of ({{ R }}, {{ C }}, {{ OH }}, {{ OW }}): the {{ mode }}
// of a grid of bilinear samples of its bin ({{ "%d per axis" % ratio if ratio > 0 else "ceil(roi size / bins) per axis" }}), as tinydl/ops/detection.py.
@group(0) @binding(0) var<storage, read> x: array<{{ x_t }}>;
@group(0) @binding(1) var<storage, read> rois: array<{{ roi_t }}>;
@group(0) @binding(2) var<storage, read> bidx: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<{{ out_t }}>;

struct Sample {
    lo: u32,
    hi: u32,
    w_lo: f32,
    w_hi: f32,
}

// Sample at v of an axis of `length`: its two taps and weights (both 0 outside [-1, length]).
fn sample(v0: f32, length: u32) -> Sample {
    var s: Sample;
    let inside = v0 >= -1.0 && v0 <= f32(length);
    let v = max(v0, 0.0);
    var lo = u32(floor(v));
    var frac = v - floor(v);
    var hi = lo + 1u;
    if (lo >= length - 1u) {
        lo = length - 1u;
        hi = lo;
        frac = 0.0;
    }
    s.lo = lo;
    s.hi = hi;
    s.w_lo = select(0.0, 1.0 - frac, inside);
    s.w_hi = select(0.0, frac, inside);
    return s;
}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    let pw = i % {{ OW }}u;
    let ph = (i / {{ OW }}u) % {{ OH }}u;
    let c = (i / {{ OW * OH }}u) % {{ C }}u;
    let r = i / {{ OW * OH * C }}u;
    let x0 = f32(rois[r * 4u]) * {{ scale }} - {{ offset }};
    let y0 = f32(rois[r * 4u + 1u]) * {{ scale }} - {{ offset }};
    var roi_w = f32(rois[r * 4u + 2u]) * {{ scale }} - {{ offset }} - x0;
    var roi_h = f32(rois[r * 4u + 3u]) * {{ scale }} - {{ offset }} - y0;
{% if not half %}
    roi_w = max(roi_w, 1.0);
    roi_h = max(roi_h, 1.0);
{% endif %}
{% if ratio > 0 %}
    let gy = {{ ratio }}u;
    let gx = {{ ratio }}u;
{% else %}
    let gy = u32(max(ceil(roi_h / {{ OH }}.0), 0.0));
    let gx = u32(max(ceil(roi_w / {{ OW }}.0), 0.0));
{% endif %}
    let step_h = roi_h / {{ OH }}.0;
    let step_w = roi_w / {{ OW }}.0;
    let plane = (u32(clamp(bidx[r], 0, {{ N - 1 }})) * {{ C }}u + c) * {{ H * W }}u;
{% if mode == "avg" %}
    var acc = 0.0;
{% else %}
    var acc = bitcast<f32>(0xff800000u);
{% endif %}
    for (var iy = 0u; iy < gy; iy++) {
        let sy = sample(y0 + f32(ph) * step_h + (f32(iy) + 0.5) * step_h / f32(gy), {{ H }}u);
        for (var ix = 0u; ix < gx; ix++) {
            let sx = sample(x0 + f32(pw) * step_w + (f32(ix) + 0.5) * step_w / f32(gx), {{ W }}u);
            let a = f32(x[plane + sy.lo * {{ W }}u + sx.lo]) * (sy.w_lo * sx.w_lo);
            let b = f32(x[plane + sy.lo * {{ W }}u + sx.hi]) * (sy.w_lo * sx.w_hi);
            let d = f32(x[plane + sy.hi * {{ W }}u + sx.lo]) * (sy.w_hi * sx.w_lo);
            let e = f32(x[plane + sy.hi * {{ W }}u + sx.hi]) * (sy.w_hi * sx.w_hi);
{% if mode == "avg" %}
            acc = acc + a + b + d + e;
{% else %}
            acc = max(acc, max(max(a, b), max(d, e)));
{% endif %}
        }
    }
{% if mode == "avg" %}
    y[i] = {{ out_t }}(acc / f32(max(gy * gx, 1u)));
{% else %}
    y[i] = {{ out_t }}(select(acc, 0.0, gy * gx == 0u));
{% endif %}
}
