// Elementwise over {{ total }} elements of shape {{ dims }}: {{ label }}
extern "C" __global__ void k(
{% for op in operands if op.arg %}
    const {{ op.ctype }}* __restrict__ in{{ op.index }},
{% endfor %}
    {{ out_ctype }}* __restrict__ out)
{
    const {{ itype }} i = ({{ itype }})blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}u) return;
{% if coords %}
    {{ coords }}
{% endif %}
{% for op in operands %}
    const {{ ct }} a{{ loop.index0 }} = {{ op.load }};
{% endfor %}
    out[i] = {{ store }};
}
