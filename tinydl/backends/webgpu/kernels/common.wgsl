// Shared helpers, pasted at the top of every kernel.
// Bounds by select on comparisons (clamp, min and max leave a NaN's result to the
// implementation): a NaN passes through, as in NumPy.
fn tanh_1(x: f32) -> f32 { return tanh(select(x, sign(x) * 10.0, abs(x) > 10.0)); }
fn tanh_4(x: vec4<f32>) -> vec4<f32> {
    return tanh(select(x, sign(x) * vec4<f32>(10.0), abs(x) > vec4<f32>(10.0)));
}
fn clamp01_1(y: f32) -> f32 { return select(select(y, 0.0, y < 0.0), 1.0, y > 1.0); }
fn clamp01_4(y: vec4<f32>) -> vec4<f32> {
    return select(select(y, vec4<f32>(0.0), y < vec4<f32>(0.0)), vec4<f32>(1.0), y > vec4<f32>(1.0));
}
fn sigmoid_1(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
fn sigmoid_4(x: vec4<f32>) -> vec4<f32> { return vec4<f32>(1.0) / (vec4<f32>(1.0) + exp(-x)); }
// NumPy's power: a negative base gives a real result for integral exponents, NaN otherwise.
fn pow_1(a: f32, b: f32) -> f32 {
    let r = pow(abs(a), b);
    let whole = round(b) == b;
    let odd = whole && abs(b % 2.0) == 1.0;
    var y = select(r, -r, a < 0.0 && odd);
    y = select(y, bitcast<f32>(0x7fc00000u), a < 0.0 && !whole);
    y = select(y, 0.0, a == 0.0 && b > 0.0);
    return select(y, 1.0, b == 0.0);
}
fn pow_4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(pow_1(a.x, b.x), pow_1(a.y, b.y), pow_1(a.z, b.z), pow_1(a.w, b.w));
}
