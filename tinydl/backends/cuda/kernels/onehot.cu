// {{ label }}: element (o, j, n) of a ({{ total // (depth * inner) }}, {{ depth }}, {{ inner }}) output is values[1] where index (o, n)
// (negative counts from {{ depth }}) equals j, values[0] elsewhere.
extern "C" __global__ void k(
    const {{ idx_ctype }}* __restrict__ idx,
    const {{ val_ctype }}* __restrict__ values,
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    const unsigned long long n = i % {{ inner }}ull;
    const unsigned long long j = (i / {{ inner }}ull) % {{ depth }}ull;
    const unsigned long long o = i / {{ depth * inner }}ull;
    long long q = (long long)({{ idx_load }});
    if (q < 0) q += {{ depth }}LL;
    const {{ val_ctype }} v = q == (long long)j ? values[1] : values[0];
    y[i] = {{ store }};
}
