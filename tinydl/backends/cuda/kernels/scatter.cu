// {{ label }}: each of {{ total }} output elements starts from data and applies, in order, every update that
// targets it (reduction {{ reduction }}), in {{ acc }}: {{ "it compares its position with " ~ scan ~ " index tuples of " ~ k ~ " coordinates" if nd else "it reads the " ~ scan ~ " updates along axis " ~ axis ~ " that share its other coordinates" }}.
__device__ __forceinline__ {{ acc }} combine_({{ acc }} v, {{ acc }} u) { return {{ combine }}; }

extern "C" __global__ void k(
    const {{ data_ctype }}* __restrict__ data,
    const {{ idx_ctype }}* __restrict__ idx,
    const {{ upd_ctype }}* __restrict__ upd,
    {{ out_ctype }}* __restrict__ y)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}ull) return;
    {{ acc }} v = {{ data_load }};
{% if nd %}
    const unsigned long long lead = i / {{ inner }}ull;
    const unsigned long long s = i % {{ inner }}ull;
    for (unsigned long long t = 0; t < {{ scan }}ull; ++t) {
        unsigned long long f = 0;
{% for j in range(k) %}
        {
            long long q = (long long)idx[t * {{ k }}ull + {{ j }}ull];
            if (q < 0) q += {{ kdims[j] }}LL;
            f = f * {{ kdims[j] }}ull + (unsigned long long)q;
        }
{% endfor %}
        if (f == lead) {
            const unsigned long long at = t * {{ inner }}ull + s;
            v = combine_(v, {{ upd_load }});
        }
    }
{% else %}
    unsigned long long rem = i;
    unsigned long long ubase = 0;
    bool inside = true;
    unsigned long long c = 0;
{% for d in range(dims | length - 1, -1, -1) %}
    {
        const unsigned long long cd = rem % {{ dims[d] }}ull;
        rem /= {{ dims[d] }}ull;
{% if d == axis %}
        c = cd;
{% else %}
        inside = inside && cd < {{ udims[d] }}ull;
        ubase += cd * {{ ustrides[d] }}ull;
{% endif %}
    }
{% endfor %}
    if (inside) {
        for (unsigned long long r = 0; r < {{ scan }}ull; ++r) {
            const unsigned long long at = ubase + r * {{ ustrides[axis] }}ull;
            long long q = (long long)idx[at];
            if (q < 0) q += {{ dims[axis] }}LL;
            if (q == (long long)c) v = combine_(v, {{ upd_load }});
        }
    }
{% endif %}
    y[i] = {{ store }};
}
