{# How a fragment kernel reads its constants: wm(i) the i-th mat4x4 (columns: one input channel's
   weights for 4 output channels), wv(i) the i-th vec4. Three modes (the thesis's weight modes):
   a uniform buffer, a storage buffer, a rgba32float texture (a mat4x4 is 4 texels), or literals in the code (M(i) and V(i) write them). #}
{% if wmode == "uniform" %}
struct Weights {
{% if KM %}
    m: array<mat4x4<f32>, {{ KM }}>,
{% endif %}
    v: array<vec4<f32>, {{ KV }}>,
};
@group(0) @binding({{ wbinding }}) var<uniform> W: Weights;
{% if KM %}
fn wm(i: u32) -> mat4x4<f32> { return W.m[i]; }
{% endif %}
fn wv(i: u32) -> vec4<f32> { return W.v[i]; }
{% elif wmode == "storage" %}
@group(0) @binding({{ wbinding }}) var<storage, read> W: array<vec4<f32>>;
{% if KM %}
fn wm(i: u32) -> mat4x4<f32> {
    return mat4x4<f32>(W[4u * i], W[4u * i + 1u], W[4u * i + 2u], W[4u * i + 3u]);
}
{% endif %}
fn wv(i: u32) -> vec4<f32> { return W[{{ 4 * KM }}u + i]; }
{% elif wmode == "texture" %}
@group(0) @binding({{ wbinding }}) var WT: texture_2d<f32>;
fn texel(t: u32) -> vec4<f32> { return textureLoad(WT, vec2<u32>(t % {{ TW }}u, t / {{ TW }}u), 0); }
{% if KM %}
fn wm(i: u32) -> mat4x4<f32> {
    return mat4x4<f32>(texel(4u * i), texel(4u * i + 1u), texel(4u * i + 2u), texel(4u * i + 3u));
}
{% endif %}
fn wv(i: u32) -> vec4<f32> { return texel({{ 4 * KM }}u + i); }
{% endif %}
