// {{ label }}: running {{ "exclusive " if exclusive }}sums{{ " from the end" if reverse }} of {{ lines }} lines of {{ L }} elements ({{ inner }} apart), a
// thread per line, in {{ acc }}.
extern "C" __global__ void k(const {{ in_ctype }}* __restrict__ x, {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ lines }}ull) return;
    const unsigned long long base = (i / {{ inner }}ull) * {{ L * inner }}ull + i % {{ inner }}ull;
    {{ acc }} s = 0;
    for (unsigned long long r = 0; r < {{ L }}ull; ++r) {
        const unsigned long long at = base + {{ "(" ~ (L - 1) ~ "ull - r)" if reverse else "r" }} * {{ inner }}ull;
        const {{ acc }} v = {{ load }};
{% if exclusive %}
        y[at] = {{ store }};
        s += v;
{% else %}
        s += v;
        y[at] = {{ store }};
{% endif %}
    }
}
