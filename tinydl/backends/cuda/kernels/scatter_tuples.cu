// {{ label }}: ScatterND without a reduction over {{ scan }} index tuples of {{ k }} coordinates,
// a thread per updated element: {% if copy %}first y = data ({{ total }} elements){% else %}then each writes its update (no two tuples name one place: ONNX's rule for reduction "none"){% endif %}.
{% if copy %}
extern "C" __global__ void k(const {{ data_ctype }}* __restrict__ data, {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    y[i] = {{ copy_store }};
}
{% else %}
extern "C" __global__ void k(
    const {{ idx_ctype }}* __restrict__ idx,
    const {{ upd_ctype }}* __restrict__ upd,
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ scan * inner }}ull) return;
    const unsigned long long t = i / {{ inner }}ull;
    const unsigned long long s = i % {{ inner }}ull;
    // the flat index of tuple t: negative coordinates count from the end, any still outside
    // is clamped
    unsigned long long f = 0;
{% for j in range(k) %}
    {
        long long q = (long long)idx[t * {{ k }}ull + {{ j }}ull];
        if (q < 0) q += {{ kdims[j] }}LL;
        q = q < 0 ? 0 : (q > {{ kdims[j] - 1 }}LL ? {{ kdims[j] - 1 }}LL : q);
        f = f * {{ kdims[j] }}ull + (unsigned long long)q;
    }
{% endfor %}
    y[f * {{ inner }}ull + s] = {{ upd_store }};
}
{% endif %}
