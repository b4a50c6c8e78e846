{{ header }}
// {{ label }}: {{ N }}x{{ C }} images of {{ H }}x{{ W }} sampled at a {{ OH }}x{{ OW }} grid each
// ({{ mode }}, {{ padding }} padding{{ ", corners aligned" if align }}), as ONNX's reference:
// the coordinate mapped from [-1, 1], then clamped or reflected where it is outside, then each
// tap outside read as zero, clamped or reflected again.
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> g: array<{{ gt }}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{ ot }}>;

// Reflected at lo and hi until inside them.
fn reflect_(v: f32, lo: f32, hi: f32) -> f32 {
    let span = hi - lo;
    if (span <= 0.0) {
        return lo;
    }
    if (v < lo) {
        let dx = lo - v;
        let n = floor(dx / span);
        let r = dx - n * span;
        return select(hi - r, lo + r, n % 2.0 == 0.0);
    }
    if (v > hi) {
        let dx = v - hi;
        let n = floor(dx / span);
        let r = dx - n * span;
        return select(lo + r, hi - r, n % 2.0 == 0.0);
    }
    return v;
}

// The coordinate along an axis of `size` pixels for grid value `v`, before its taps.
fn coord(v: f32, size: f32) -> f32 {
{% if align %}
    var c = (v + 1.0) * 0.5 * (size - 1.0);
    let lo = 0.0;
    let hi = size - 1.0;
{% else %}
    var c = ((v + 1.0) * size - 1.0) * 0.5;
    let lo = -0.5;
    let hi = size - 0.5;
{% endif %}
{% if mode == "nearest" %}
    c = round(c);  // (ties to even)
{% endif %}
    if (c < lo || c > hi) {
{% if padding == "border" %}
        c = clamp(c, 0.0, size - 1.0);
{% elif padding == "reflection" %}
        c = reflect_(c, lo, hi);
{% endif %}
    }
    return c;
}

// Pixel (yi, xi) of image `base`, a tap outside read as the padding says.
fn tap(base: u32, yi: i32, xi: i32) -> f32 {
{% if padding == "zeros" %}
    if (xi < 0 || yi < 0 || xi >= {{ W }} || yi >= {{ H }}) {
        return 0.0;
    }
    let cx = xi;
    let cy = yi;
{% elif padding == "border" %}
    let cx = clamp(xi, 0, {{ W - 1 }});
    let cy = clamp(yi, 0, {{ H - 1 }});
{% else %}
{% if align %}
    let cx = clamp(i32(trunc(reflect_(f32(xi), 0.0, {{ W - 1 }}.0))), 0, {{ W - 1 }});
    let cy = clamp(i32(trunc(reflect_(f32(yi), 0.0, {{ H - 1 }}.0))), 0, {{ H - 1 }});
{% else %}
    let cx = clamp(i32(trunc(reflect_(f32(xi), -0.5, {{ W }}.0 - 0.5))), 0, {{ W - 1 }});
    let cy = clamp(i32(trunc(reflect_(f32(yi), -0.5, {{ H }}.0 - 0.5))), 0, {{ H - 1 }});
{% endif %}
{% endif %}
    return f32(x[base + u32(cy) * {{ W }}u + u32(cx)]);
}

{% if mode == "cubic" %}
// Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 for fraction t.
fn cubic(t: f32) -> vec4<f32> {
    let a = -0.75;
    let t1 = t + 1.0;
    let s = 1.0 - t;
    let s1 = 2.0 - t;
    return vec4<f32>(
        ((a * t1 - 5.0 * a) * t1 + 8.0 * a) * t1 - 4.0 * a,
        ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
        ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
        ((a * s1 - 5.0 * a) * s1 + 8.0 * a) * s1 - 4.0 * a);
}
{% endif %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * {{ GX }}u + wid.x) * 256u + li;
    if (i >= {{ TOTAL }}u) {
        return;
    }
    let ox = i % {{ OW }}u;
    let oy = (i / {{ OW }}u) % {{ OH }}u;
    let nc = i / {{ OW * OH }}u;  // n * C + c
    let n = nc / {{ C }}u;
    let gi = ((n * {{ OH }}u + oy) * {{ OW }}u + ox) * 2u;
    let cx = coord(f32(g[gi]), {{ W }}.0);
    let cy = coord(f32(g[gi + 1u]), {{ H }}.0);
    let base = nc * {{ H * W }}u;
{% if mode == "nearest" %}
    let r = tap(base, i32(cy), i32(cx));
{% elif mode == "linear" %}
    let x0 = floor(cx);
    let y0 = floor(cy);
    let fx = cx - x0;
    let fy = cy - y0;
    let xi = i32(x0);
    let yi = i32(y0);
    let top = (1.0 - fx) * tap(base, yi, xi) + fx * tap(base, yi, xi + 1);
    let bottom = (1.0 - fx) * tap(base, yi + 1, xi) + fx * tap(base, yi + 1, xi + 1);
    let r = (1.0 - fy) * top + fy * bottom;
{% else %}
    let x0 = floor(cx);
    let y0 = floor(cy);
    let wx = cubic(cx - x0);
    let wy = cubic(cy - y0);
    let xi = i32(x0);
    let yi = i32(y0);
    var r = 0.0;
    for (var k = 0; k < 4; k++) {
        let row = yi + k - 1;
        let v = vec4<f32>(tap(base, row, xi - 1), tap(base, row, xi), tap(base, row, xi + 1),
                          tap(base, row, xi + 2));
        r += wy[k] * dot(wx, v);
    }
{% endif %}
    y[i] = {{ ot }}(r);
}
