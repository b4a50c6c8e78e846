{{ header }}
{% if op == "tinydl.TransformTensorBilinear" %}
// {{ label }}: a thread per output element of ({{ N }}, {{ C }}, {{ OH }}, {{ OW }}): input (H {{ H }}, W {{ W }}) sampled bilinearly at
// matrix @ (p + 0.5) - 0.5 (0 outside the input, a corner past the last row or column reads 0).
@group(0) @binding(0) var<storage, read> x: array<{{ x_t }}>;
@group(0) @binding(1) var<storage, read> m: array<{{ m_t }}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{ out_t }}>;

fn tap(plane: u32, yi: i32, xi: i32) -> f32 {
    if (yi >= {{ H }} || xi >= {{ W }}) {
        return 0.0;
    }
    return f32(x[plane + u32(yi) * {{ W }}u + u32(xi)]);
}

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (i >= {{ total }}u) {
        return;
    }
    let ox = f32(i % {{ OW }}u);
    let oy = f32((i / {{ OW }}u) % {{ OH }}u);
    let nc = i / {{ OH * OW }}u;
    let n = nc / {{ C }}u;
    let mb = {{ "0u" if MB == 1 else "n" }} * 16u;
    let m00 = f32(m[mb]);
    let m01 = f32(m[mb + 1u]);
    let m10 = f32(m[mb + 4u]);
    let m11 = f32(m[mb + 5u]);
    let tx = m00 * ox + m01 * oy + (f32(m[mb + 3u]) + 0.5 * m00 + 0.5 * m01 - 0.5);
    let ty = m10 * ox + m11 * oy + (f32(m[mb + 7u]) + 0.5 * m10 + 0.5 * m11 - 0.5);
    if (!(tx >= 0.0 && tx <= {{ W - 1 }}.0 && ty >= 0.0 && ty <= {{ H - 1 }}.0)) {
        y[i] = {{ out_t }}(0.0);
        return;
    }
    let x0 = floor(tx);
    let y0 = floor(ty);
    let fx = tx - x0;
    let fy = ty - y0;
    let xi = i32(x0);
    let yi = i32(y0);
    let plane = nc * {{ H * W }}u;
    let upper = (1.0 - fx) * tap(plane, yi, xi) + fx * tap(plane, yi, xi + 1);
    let lower = (1.0 - fx) * tap(plane, yi + 1, xi) + fx * tap(plane, yi + 1, xi + 1);
    y[i] = {{ out_t }}(fy * lower + (1.0 - fy) * upper);
}
{% else %}
// {{ label }}: a thread per batch entry makes its 4x4 matrix from {{ L }} landmarks (x, y, z): the bounding box of
// landmarks {{ subset }} in the frame rotated so landmarks {{ left }} -> {{ right }} lie at {{ target }} radians.
@group(0) @binding(0) var<storage, read> lm: array<{{ x_t }}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{ out_t }}>;

@compute @workgroup_size({{ wg }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = (wid.y * {{ gx }}u + wid.x) * {{ wg }}u + lid;
    if (n >= {{ N }}u) {
        return;
    }
    let base = n * {{ L * 3 }}u;
    let dx = f32(lm[base + {{ right * 3 }}u]) - f32(lm[base + {{ left * 3 }}u]);
    let dy = f32(lm[base + {{ right * 3 + 1 }}u]) - f32(lm[base + {{ left * 3 + 1 }}u]);
    let r = {{ target }} - atan2(dy, dx);
    let c = cos(r);
    let s = sin(r);
    var lo_x = bitcast<f32>(0x7f800000u);
    var lo_y = lo_x;
    var hi_x = -lo_x;
    var hi_y = -lo_x;
{% for k in subset %}
    {
        let px = f32(lm[base + {{ k * 3 }}u]);
        let py = f32(lm[base + {{ k * 3 + 1 }}u]);
        let rx = c * px - s * py;
        let ry = s * px + c * py;
        lo_x = min(lo_x, rx);
        hi_x = max(hi_x, rx);
        lo_y = min(lo_y, ry);
        hi_y = max(hi_y, ry);
    }
{% endfor %}
    let mx = (lo_x + hi_x) / 2.0;
    let my = (lo_y + hi_y) / 2.0;
    let sx = {{ scale_x }} * (hi_x - lo_x) / {{ OW }}.0;
    let sy = {{ scale_y }} * (hi_y - lo_y) / {{ OH }}.0;
    let a00 = c * sx;
    let a01 = s * sy;
    let a10 = -s * sx;
    let a11 = c * sy;
    let o = n * 16u;
    for (var k = 0u; k < 16u; k++) {
        y[o + k] = {{ out_t }}(0.0);
    }
    y[o] = {{ out_t }}(a00);
    y[o + 1u] = {{ out_t }}(a01);
    y[o + 3u] = {{ out_t }}(c * mx + s * my - a00 * {{ OW / 2 }} - a01 * {{ OH / 2 }});
    y[o + 4u] = {{ out_t }}(a10);
    y[o + 5u] = {{ out_t }}(a11);
    y[o + 7u] = {{ out_t }}(-s * mx + c * my - a10 * {{ OW / 2 }} - a11 * {{ OH / 2 }});
    y[o + 10u] = {{ out_t }}(1.0);
    y[o + 15u] = {{ out_t }}(1.0);
}
{% endif %}
