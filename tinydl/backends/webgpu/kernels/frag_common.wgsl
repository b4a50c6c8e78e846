// The vertex stage every fragment kernel shares: one triangle that covers the viewport, (-1,-1),
// (3,-1), (-1,3); the instance index is the batch element n, handed flat to the fragment stage.
struct VOut {
    @builtin(position) pos: vec4<f32>,
    @location(0) @interpolate(flat) n: u32,
};

@vertex
fn vs(@builtin(vertex_index) i: u32, @builtin(instance_index) n: u32) -> VOut {
    let xy = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return VOut(vec4<f32>(xy * 2.0 - 1.0, 0.0, 1.0), n);
}

// One vec4 (4 channels) per color attachment.
struct FOut {
{% for a in range(A) %}
    @location({{ a }}) o{{ a }}: vec4<f32>,
{% endfor %}
};
