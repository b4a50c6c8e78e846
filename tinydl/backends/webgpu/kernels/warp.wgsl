{{ header }}
// {{ label }}: {{ crops }} crops of {{ oh }}x{{ ow }} ({{ layout }}) out of {{ images }} image(s) of {{ h }}x{{ w }}x{{ c }}; output
// pixel (u, v) samples the image at (X/W, Y/W) = matrix[k] @ (u, v, 1), bilinearly ({{ border }} border).
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> m: array<{{ mt }}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{ ot }}>;

fn tap(base: u32, ch: u32, yi: i32, xi: i32) -> f32 {
{% if border == "zero" %}
    if (xi < 0 || yi < 0 || xi >= {{ w }} || yi >= {{ h }}) {
        return 0.0;
    }
{% endif %}
    let cx = u32(clamp(xi, 0, {{ w - 1 }}));
    let cy = u32(clamp(yi, 0, {{ h - 1 }}));
{% if layout == "NCHW" %}
    return f32(x[((base * {{ c }}u + ch) * {{ h }}u + cy) * {{ w }}u + cx]);
{% else %}
    return f32(x[((base * {{ h }}u + cy) * {{ w }}u + cx) * {{ c }}u + ch]);
{% endif %}
}

// A coordinate past one pixel outside reads like one just past it; NaN reads as outside.
fn bound(s: f32, hi: f32) -> f32 {
    return select(clamp(s, -2.0, hi), -2.0, isnan_1(s));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * 256u + li;
    if (i >= {{ total }}u) {
        return;
    }
{% if layout == "NCHW" %}
    let u = i % {{ ow }}u;
    let v = (i / {{ ow }}u) % {{ oh }}u;
    let ch = (i / {{ ow * oh }}u) % {{ c }}u;
    let k = i / {{ ow * oh * c }}u;
{% else %}
    let ch = i % {{ c }}u;
    let u = (i / {{ c }}u) % {{ ow }}u;
    let v = (i / {{ c * ow }}u) % {{ oh }}u;
    let k = i / {{ c * ow * oh }}u;
{% endif %}
    let r = k * 9u;
    let fu = f32(u);
    let fv = f32(v);
    let px = f32(m[r]) * fu + f32(m[r + 1u]) * fv + f32(m[r + 2u]);
    let py = f32(m[r + 3u]) * fu + f32(m[r + 4u]) * fv + f32(m[r + 5u]);
    let pw = f32(m[r + 6u]) * fu + f32(m[r + 7u]) * fv + f32(m[r + 8u]);
    let sx = select(bound(px / pw, {{ w + 1 }}.0), -2.0, pw == 0.0);
    let sy = select(bound(py / pw, {{ h + 1 }}.0), -2.0, pw == 0.0);
    let x0 = floor(sx);
    let y0 = floor(sy);
    let fx = sx - x0;
    let fy = sy - y0;
    let xi = i32(x0);
    let yi = i32(y0);
    let base = {{ "k" if images > 1 else "0u" }};
    let top = (1.0 - fx) * tap(base, ch, yi, xi) + fx * tap(base, ch, yi, xi + 1);
    let bottom = (1.0 - fx) * tap(base, ch, yi + 1, xi) + fx * tap(base, ch, yi + 1, xi + 1);
    y[i] = {{ ot }}((1.0 - fy) * top + fy * bottom);
}
