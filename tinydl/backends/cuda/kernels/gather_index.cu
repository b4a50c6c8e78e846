// {{ label }}: each element of a {{ dims }} region reads src at its coordinates . {{ sstrides }}
// plus index * {{ axis_stride }}, the index read at coordinates . {{ istrides }} (a negative
// one counts from the end of the axis of {{ axis_dim }}; any still outside it is clamped).
extern "C" __global__ void k(
    const {{ in_ctype }}* __restrict__ src,
    const {{ idx_ctype }}* __restrict__ idx,
    {{ out_ctype }}* __restrict__ dst)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    unsigned long long rem = i;
    unsigned long long at = 0;
    unsigned long long ip = 0;
{% for k in range(dims | length - 1, -1, -1) %}
    {
        const unsigned long long c = rem % {{ dims[k] }}ull;
        rem /= {{ dims[k] }}ull;
{% if sstrides[k] %}
        at += c * {{ sstrides[k] }}ull;
{% endif %}
{% if istrides[k] %}
        ip += c * {{ istrides[k] }}ull;
{% endif %}
    }
{% endfor %}
    long long j = (long long)idx[ip];
    if (j < 0) j += {{ axis_dim }}LL;
    j = j < 0 ? 0 : (j > {{ axis_dim - 1 }}LL ? {{ axis_dim - 1 }}LL : j);
    at += (unsigned long long)j * {{ axis_stride }}ull;
{% if same %}
    dst[i] = src[at];
{% else %}
    dst[i] = {{ store }};
{% endif %}
}
