{% import "nd_index.cuh" as nd %}
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
{{ nd.flat_index("t", k, kdims) -}}
    y[f * {{ inner }}ull + s] = {{ upd_store }};
}
{% endif %}
