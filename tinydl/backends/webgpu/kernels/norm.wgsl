{{ header }}
{% import "tree.wgsl" as tree %}
{% if channels_first %}
// {{ label }}: LayerNormalization over axis 1 of an NCHW tensor, each of {{ rows }} pixels'
// {{ C }} channels normalized alone (the channels-last LayerNormalization between two
// transposes, without them): the mean, then the variance as the mean of (x - mean)^2 (both in
// f32), then (x - mean) / sqrt(var + epsilon) * scale + bias.
{% else %}
// {{ label }}: {{ rows }} rows of {{ L }} elements normalized alone; a workgroup per row: the mean,
// then the variance as the mean of (x - mean)^2 (both in f32, so a large mean with a small
// variance keeps its precision), then (x - mean) / sqrt(var + epsilon) * scale + bias.
{% endif %}
@group(0) @binding(0) var<storage, read> x: array<{{ st }}>;
@group(0) @binding(1) var<storage, read> scale: array<{{ wt }}>;
{% if bias %}
@group(0) @binding(2) var<storage, read> bias: array<{{ bt }}>;
{% endif %}
@group(0) @binding({{ 3 if bias else 2 }}) var<storage, read_write> y: array<{{ ot }}>;
{% if stats %}
@group(0) @binding({{ 4 if bias else 3 }}) var<storage, read_write> mean_out: array<{{ mt }}>;
@group(0) @binding({{ 5 if bias else 4 }}) var<storage, read_write> inv_out: array<{{ it }}>;
{% endif %}

{% if channels_first %}
// 32 neighbouring pixels a workgroup (so every read is contiguous), their channels split 8 ways.
var<workgroup> part: array<f32, 256>;

fn column_sum(li: u32, v: f32) -> f32 {
    part[li] = v;
    workgroupBarrier();
    var r = 0.0;
    for (var j = 0u; j < 8u; j = j + 1u) {
        r = r + part[j * 32u + li % 32u];
    }
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let p = (wid.y * {{ gx }}u + wid.x) * 32u + li % 32u;
    let pc = min(p, {{ rows - 1 }}u);
    let base = pc / {{ HW }}u * {{ C * HW }}u + pc % {{ HW }}u;
    var s = 0.0;
    for (var c = li / 32u; c < {{ C }}u; c = c + 8u) {
        s = s + f32(x[base + c * {{ HW }}u]);
    }
    let mean = column_sum(li, s) / {{ C }}.0;
    var q = 0.0;
    for (var c = li / 32u; c < {{ C }}u; c = c + 8u) {
        let d = f32(x[base + c * {{ HW }}u]) - mean;
        q = q + d * d;
    }
    let inv = 1.0 / sqrt(column_sum(li, q) / {{ C }}.0 + {{ epsilon }});
    if (p < {{ rows }}u) {
        for (var c = li / 32u; c < {{ C }}u; c = c + 8u) {
            let v = (f32(x[base + c * {{ HW }}u]) - mean) * inv * f32(scale[c]){{ " + f32(bias[c])" if bias else "" }};
            y[base + c * {{ HW }}u] = {{ ot }}(v);
        }
    }
}
{% else %}
var<workgroup> part: array<f32, {{ WG }}>;

fn row_sum(li: u32, v: f32) -> f32 {
    part[li] = v;
{{ tree.fold(WG, steps, "{a} + {b}") }}
    workgroupBarrier();
    let r = part[0];
    workgroupBarrier();
    return r;
}

// The scale and bias index of element k of row `row`.
fn channel(row: u32, k: u32) -> u32 {
{% if per_channel %}
    return (row % {{ groups }}u) * {{ channels // groups }}u + k / {{ spatial }}u;
{% else %}
    return k;
{% endif %}
}

@compute @workgroup_size({{ WG }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = min(wid.y * {{ gx }}u + wid.x, {{ rows - 1 }}u);
    let base = row * {{ L }}u;
    var s = 0.0;
    for (var k = li; k < {{ L }}u; k += {{ WG }}u) {
        s = s + f32(x[base + k]);
    }
    let mean = row_sum(li, s) / {{ L }}.0;
    var q = 0.0;
    for (var k = li; k < {{ L }}u; k += {{ WG }}u) {
        let d = f32(x[base + k]) - mean;
        q = q + d * d;
    }
    let inv = 1.0 / sqrt(row_sum(li, q) / {{ L }}.0 + {{ epsilon }});
    if (wid.y * {{ gx }}u + wid.x < {{ rows }}u) {
        for (var k = li; k < {{ L }}u; k += {{ WG }}u) {
            let c = channel(row, k);
            let v = (f32(x[base + k]) - mean) * inv * f32(scale[c]){{ " + f32(bias[c])" if bias else "" }};
            y[base + k] = {{ ot }}(v);
        }
{% if stats %}
        if (li == 0u) {
            mean_out[row] = {{ mt }}(mean);
            inv_out[row] = {{ it }}(inv);
        }
{% endif %}
    }
}
{% endif %}
