{% set NT = BQ * TPR %}
{% set DP = D + 1 %}
// {{ label }}: softmax({{ scale }} * Q.K^T{{ " + mask" if MS else "" }}).V for {{ B }}x{{ H }} (batch, head) pairs of
// {{ M }} queries x {{ N }} keys, head dims {{ D }} (Q, K) and {{ DV }} (V). A block takes {{ BQ }} query rows of one
// pair, {{ TPR }} threads per row, and walks the keys in blocks of {{ BK }} staged in shared memory with an online
// softmax: the running max and sum of each row rescale its fp32 accumulators.
extern "C" __global__ void __launch_bounds__({{ NT }}) k(
    const {{ qt }}* __restrict__ q,
    const {{ kt }}* __restrict__ k,
    const {{ vt }}* __restrict__ v,
{% if MS %}
    const {{ mt }}* __restrict__ mask,
{% endif %}
    {{ yt }}* __restrict__ y)
{
    __shared__ float qs[{{ BQ * DP }}];  // [row][d], scaled; rows padded against bank conflicts
    __shared__ float ks[{{ BK * DP }}];  // [key][d]
    __shared__ float vs[{{ BK * DV }}];  // [key][column]
    __shared__ float ps[{{ BQ * (BK + 1) }}];  // [row][key]: the block's scores
    const unsigned bh = blockIdx.x, bi = bh / {{ H }}u, hi = bh % {{ H }}u;
    const unsigned q0 = blockIdx.y * {{ BQ }}u;
    const unsigned r = threadIdx.x / {{ TPR }}u, t = threadIdx.x % {{ TPR }}u;
    const unsigned row = q0 + r;
    const unsigned long long qb = (unsigned long long)bi * {{ Q[0] }}ull + (unsigned long long)hi * {{ Q[1] }}ull;
    const unsigned long long kb = (unsigned long long)bi * {{ K[0] }}ull + (unsigned long long)hi * {{ K[1] }}ull;
    const unsigned long long vb = (unsigned long long)bi * {{ V[0] }}ull + (unsigned long long)hi * {{ V[1] }}ull;
{% if MS %}
    const unsigned long long mb = (unsigned long long)bi * {{ MS[0] }}ull +
        (unsigned long long)hi * {{ MS[1] }}ull + (unsigned long long)min(row, {{ M - 1 }}u) * {{ MS[2] }}ull;
{% endif %}
    for (unsigned e = threadIdx.x; e < {{ BQ * D }}u; e += {{ NT }}u) {
        const unsigned rr = e / {{ D }}u, d = e % {{ D }}u;
        qs[rr * {{ DP }}u + d] = q0 + rr < {{ M }}u ? {{ qload }} * {{ scale }} : 0.0f;
    }
    float m = -3.402823466e+38f, l = 0.0f;
    float acc[{{ CPT }}];
#pragma unroll
    for (int c = 0; c < {{ CPT }}; ++c) acc[c] = 0.0f;
    // No thread leaves before the loop ends: every thread reaches every __syncthreads.
    for (unsigned k0 = 0; k0 < {{ N }}u; k0 += {{ BK }}u) {
        const unsigned kn = min({{ BK }}u, {{ N }}u - k0);
        __syncthreads();
        for (unsigned e = threadIdx.x; e < {{ BK * D }}u; e += {{ NT }}u) {
{% if k_key_fast %}
            const unsigned j = e % {{ BK }}u, d = e / {{ BK }}u;
{% else %}
            const unsigned j = e / {{ D }}u, d = e % {{ D }}u;
{% endif %}
            ks[j * {{ DP }}u + d] = j < kn ? {{ kload }} : 0.0f;
        }
        for (unsigned e = threadIdx.x; e < {{ BK * DV }}u; e += {{ NT }}u) {
            const unsigned j = e / {{ DV }}u, c = e % {{ DV }}u;
            vs[e] = j < kn ? {{ vload }} : 0.0f;
        }
        __syncthreads();
        // This thread's scores: keys t, t + TPR, ... of the block.
        for (unsigned j = t; j < kn; j += {{ TPR }}u) {
            float s = 0.0f;
#pragma unroll 8
            for (int d = 0; d < {{ D }}; ++d) s = fmaf(qs[r * {{ DP }}u + d], ks[j * {{ DP }}u + d], s);
{% if MS %}
            s += {{ mload }};
{% endif %}
            ps[r * {{ BK + 1 }}u + j] = s;
        }
        __syncthreads();
        // The row's new max; each of its threads then takes every exp it needs itself.
        float mx = m;
        for (unsigned j = 0; j < kn; ++j) mx = fmaxf(mx, ps[r * {{ BK + 1 }}u + j]);
        const float corr = expf(m - mx);
        m = mx;
        l *= corr;
#pragma unroll
        for (int c = 0; c < {{ CPT }}; ++c) acc[c] *= corr;
        for (unsigned j = 0; j < kn; ++j) {
            const float p = expf(ps[r * {{ BK + 1 }}u + j] - mx);
            l += p;
#pragma unroll
            for (int c = 0; c < {{ CPT }}; ++c) {
{% if DV % TPR %}
                const unsigned col = min(t + c * {{ TPR }}u, {{ DV - 1 }}u);
{% else %}
                const unsigned col = t + c * {{ TPR }}u;
{% endif %}
                acc[c] = fmaf(p, vs[j * {{ DV }}u + col], acc[c]);
            }
        }
    }
    if (row >= {{ M }}u) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < {{ CPT }}; ++c) {
        const unsigned col = t + c * {{ TPR }}u;
        if (col < {{ DV }}u) y[((unsigned long long)bh * {{ M }}u + row) * {{ DV }}ull + col] = {{ ystore }};
    }
}
