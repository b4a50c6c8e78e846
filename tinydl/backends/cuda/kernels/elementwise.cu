{% if GENERIC %}
// tinydl: compiled fast, to run for a while
// Elementwise, generic: the extents and the operands' strides come in `g` (program.py,
// "generic_kernels"), so every launch of this expression over {{ nd }}-axis shapes shares it.
struct Ext {
    unsigned total;
    unsigned d[{{ nd }}];
    unsigned s[{{ [strided, 1] | max }}][{{ nd }}];
};
{% else %}
// Elementwise over {{ total }} elements of shape {{ dims }}: {{ label }}
{% endif %}
extern "C" __global__ void k(
{% if GENERIC %}
    const Ext g,
{% endif %}
{% for op in operands if op.arg %}
    const {{ op.ctype }}* __restrict__ in{{ op.index }},
{% endfor %}
    {{ out_ctype }}* __restrict__ out)
{
    const {{ itype }} i = ({{ itype }})blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ "g.total" if GENERIC else total ~ "u" }}) return;
{% if coords %}
    {{ coords }}
{% endif %}
{% for op in operands %}
    const {{ ct }} a{{ loop.index0 }} = {{ op.load }};
{% endfor %}
    out[i] = {{ store }};
}
