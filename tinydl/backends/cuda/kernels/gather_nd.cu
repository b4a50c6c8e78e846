{% import "nd_index.cuh" as nd %}
// {{ label }}: element (t, s) of {{ total }} is element s of the slice of {{ inner }} at index tuple t ({{ k }}
// coordinates into {{ kdims }}; negative ones count from the end, any still outside is clamped)
// of batch t / {{ per_batch }}.
extern "C" __global__ void k(
    const {{ in_ctype }}* __restrict__ src,
    const {{ idx_ctype }}* __restrict__ idx,
    {{ out_ctype }}* __restrict__ dst)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    const unsigned long long t = i / {{ inner }}ull;
{{ nd.flat_index("t", k, kdims) -}}
    const unsigned long long at = (t / {{ per_batch }}ull) * {{ batch_stride }}ull + f * {{ inner }}ull + i % {{ inner }}ull;
{% if same %}
    dst[i] = src[at];
{% else %}
    dst[i] = {{ store }};
{% endif %}
}
