// {{ label }}: each element of a {{ dims }} region reads src at the sum of per-axis table
// entries (a negative entry means padding) and writes dst at {{ base }} + coords . strides.
extern "C" __global__ void k(
    const {{ in_ctype }}* __restrict__ src,
    const long long* __restrict__ tab,
    {{ out_ctype }}* __restrict__ dst)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    unsigned long long rem = i;
    long long at = 0;
    bool inside = true;
    unsigned long long to = {{ base }}ull;
{% for k in range(dims | length - 1, -1, -1) %}
    {
        const unsigned long long c = rem % {{ dims[k] }}ull;
        rem /= {{ dims[k] }}ull;
        const long long t = tab[{{ tbase[k] }} + c];
        inside = inside && t >= 0;
        at += t;
        to += c * {{ ostrides[k] }}ull;
    }
{% endfor %}
{% if same %}
    dst[to] = inside ? src[at] : ({{ out_ctype }})({{ pad }});
{% else %}
    const {{ ct }} v = inside ? {{ load }} : ({{ ct }})({{ pad }});
    dst[to] = {{ store }};
{% endif %}
}
