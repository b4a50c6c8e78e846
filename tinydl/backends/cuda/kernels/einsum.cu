// {{ label }}: each of {{ total }} output elements (dims {{ out_dims }}) sums {{ count }} products of {{ n }} operands
// (summed dims {{ sum_dims }}), in {{ acc }}.
extern "C" __global__ void k(
{% for o in range(n) %}
    const {{ in_ctype[o] }}* __restrict__ x{{ o }},
{% endfor %}
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    unsigned long long rem = i;
{% for o in range(n) %}
    unsigned long long b{{ o }} = 0;
{% endfor %}
{% for d in range(out_dims | length - 1, -1, -1) %}
    {
        const unsigned long long c = rem % {{ out_dims[d] }}ull;
        rem /= {{ out_dims[d] }}ull;
{% for o in range(n) %}{% if out_strides[o][d] %}
        b{{ o }} += c * {{ out_strides[o][d] }}ull;
{% endif %}{% endfor %}
    }
{% endfor %}
    {{ acc }} s = 0;
    for (unsigned long long r = 0; r < {{ count }}ull; ++r) {
        unsigned long long q = r;
{% for o in range(n) %}
        unsigned long long a{{ o }} = b{{ o }};
{% endfor %}
{% for d in range(sum_dims | length - 1, -1, -1) %}
        {
            const unsigned long long c = q % {{ sum_dims[d] }}ull;
            q /= {{ sum_dims[d] }}ull;
{% for o in range(n) %}{% if sum_strides[o][d] %}
            a{{ o }} += c * {{ sum_strides[o][d] }}ull;
{% endif %}{% endfor %}
        }
{% endfor %}
        s += {% for o in range(n) %}{{ loads[o] }}{{ " * " if not loop.last }}{% endfor %};
    }
    y[i] = {{ store }};
}
