{% if channels_first %}
// {{ label }}: LayerNormalization over axis 1 of an NCHW tensor, each pixel's {{ C }} channels
// normalized alone (the channels-last LayerNormalization between two transposes, without them):
{% else %}
// {{ label }}: {{ rows }} rows of {{ L }} elements normalized alone; a {{ "warp" if per_warp else "block" }} per row:
{% endif %}
// the mean, then the variance as the mean of (x - mean)^2 (both in fp32, so a large mean with a
// small variance keeps its precision), then (x - mean) / sqrt(var + epsilon) * scale + bias.

extern "C" __global__ void __launch_bounds__({{ T }}) k(
    const {{ xt }}* __restrict__ x,
    const {{ wt }}* __restrict__ scale,
{% if bias %}
    const {{ bt }}* __restrict__ bias,
{% endif %}
{% if stats %}
    {{ yt }}* __restrict__ y,
    {{ mt }}* __restrict__ mean_out,
    {{ it }}* __restrict__ inv_out)
{% else %}
    {{ yt }}* __restrict__ y)
{% endif %}
{
{% if channels_first %}
    // 32 neighbouring pixels a block (lane: pixel, so every read is coalesced), their channels
    // split {{ Y }} ways over the block's warps; the partial sums meet in shared memory.
    __shared__ float part[{{ Y }}][33];
    const unsigned px = threadIdx.x & 31u, cy = threadIdx.x >> 5;
    const {{ itype }} p = ({{ itype }})blockIdx.x * 32u + px;
    const bool live = p < {{ rows }}u;
    const {{ itype }} base = live ? p / {{ HW }}u * {{ C * HW }}u + p % {{ HW }}u : 0;
    float s = 0.0f;
    if (live)
        for (unsigned c = cy; c < {{ C }}u; c += {{ Y }}u) s += {{ xload }};
    part[cy][px] = s;
    __syncthreads();
    float mean = 0.0f;
#pragma unroll
    for (int j = 0; j < {{ Y }}; ++j) mean += part[j][px];
    mean *= {{ 1.0 / C }}f;
    __syncthreads();
    float q = 0.0f;
    if (live)
        for (unsigned c = cy; c < {{ C }}u; c += {{ Y }}u) {
            const float d = {{ xload }} - mean;
            q += d * d;
        }
    part[cy][px] = q;
    __syncthreads();
    float var = 0.0f;
#pragma unroll
    for (int j = 0; j < {{ Y }}; ++j) var += part[j][px];
    const float inv = rsqrtf(var * {{ 1.0 / C }}f + {{ epsilon }});
    if (!live) return;
    for (unsigned c = cy; c < {{ C }}u; c += {{ Y }}u) {
        const float v = ({{ xload }} - mean) * inv * {{ wload }}{{ (" + " ~ bload) if bias else "" }};
        y[base + ({{ itype }})c * {{ HW }}u] = {{ ystore }};
    }
}
{% else %}
{% if per_warp %}
    // The exit is per warp (all lanes share the row), so shuffles see full warps.
    const {{ itype }} row = ({{ itype }})blockIdx.x * {{ warps }}u + (threadIdx.x >> 5);
    if (row >= {{ rows }}u) return;
    const unsigned t = threadIdx.x & 31u, step = 32u;
{% else %}
    __shared__ float part[{{ warps }}];
    const {{ itype }} row = blockIdx.x;
    const unsigned t = threadIdx.x, step = {{ T }}u;
{% endif %}
    const {{ itype }} base = row * {{ L }}u;
    float s = 0.0f;
    for (unsigned k = t; k < {{ L }}u; k += step) s += {{ xload }};
    const float mean = {{ "warp_sum_(s)" if per_warp else "block_sum_(s, part)" }} * {{ 1.0 / L }}f;
    float q = 0.0f;
    for (unsigned k = t; k < {{ L }}u; k += step) {
        const float d = {{ xload }} - mean;
        q += d * d;
    }
    const float inv = rsqrtf({{ "warp_sum_(q)" if per_warp else "block_sum_(q, part)" }} * {{ 1.0 / L }}f + {{ epsilon }});
    for (unsigned k = t; k < {{ L }}u; k += step) {
{% if per_channel %}
        const unsigned c = (unsigned)(row % {{ groups }}u) * {{ channels // groups }}u + k / {{ spatial }}u;
{% else %}
        const unsigned c = k;
{% endif %}
        const float v = ({{ xload }} - mean) * inv * {{ wload }}{{ (" + " ~ bload) if bias else "" }};
        y[base + k] = {{ ystore }};
    }
{% if stats %}
    if (t == 0) {
        mean_out[row] = {{ mstore }};
        inv_out[row] = {{ istore }};
    }
{% endif %}
}
{% endif %}
