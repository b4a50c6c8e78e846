// Shared helpers, pasted at the top of every kernel.
// clamp, min and max leave a NaN's result to the implementation (NVIDIA's drops it): a NaN is
// passed through explicitly, as in NumPy.
fn tanh_1(x: f32) -> f32 { return select(tanh(clamp(x, -10.0, 10.0)), x, isnan_1(x)); }
fn tanh_4(x: vec4<f32>) -> vec4<f32> {
    return select(tanh(clamp(x, vec4<f32>(-10.0), vec4<f32>(10.0))), x, isnan_4(x));
}
// NaN by its bits: a comparison of x with itself may be folded away by a driver.
fn isnan_1(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn isnan_4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}
fn clamp01_1(y: f32) -> f32 { return select(clamp(y, 0.0, 1.0), y, isnan_1(y)); }
fn clamp01_4(y: vec4<f32>) -> vec4<f32> {
    return select(clamp(y, vec4<f32>(0.0), vec4<f32>(1.0)), y, isnan_4(y));
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
// log(1 + e^x) without overflow.
fn softplus_1(x: f32) -> f32 { return max(x, 0.0) + log(1.0 + exp(-abs(x))); }
fn softplus_4(x: vec4<f32>) -> vec4<f32> {
    return max(x, vec4<f32>(0.0)) + log(vec4<f32>(1.0) + exp(-abs(x)));
}
// C's fmod (the sign of a): a - trunc(a / b) * b in one rounding, the quotient corrected by one
// where a / b rounded across a whole number.
fn fmod_1(a: f32, b: f32) -> f32 {
    let m = abs(b);
    let s = select(1.0, -1.0, a < 0.0);
    var r = fma(-trunc(a / b), b, a);
    r = select(r, r - s * m, abs(r) >= m);
    return select(r, r + s * m, r * s < 0.0);
}
fn fmod_4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(fmod_1(a.x, b.x), fmod_1(a.y, b.y), fmod_1(a.z, b.z), fmod_1(a.w, b.w));
}
