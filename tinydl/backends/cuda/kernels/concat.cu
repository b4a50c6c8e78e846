// {{ label }}: Concat of {{ n }} inputs along an axis of {{ channels }} in one launch: each output
// element finds its input and position along the axis in a per-position table
// (input << 20 | position within it), the rest of its index being the same in every input.
extern "C" __global__ void k(
{% for i in range(n) %}    const {{ ctype }}* __restrict__ s{{ i }},
{% endfor %}    const int* __restrict__ tab,
    {{ ctype }}* __restrict__ dst)
{
    const unsigned int i = blockIdx.x * {{ block }}u + threadIdx.x;
    if (i >= {{ total }}u) return;
    const unsigned int r = i % {{ inner }}u;
    const unsigned int t = i / {{ inner }}u;
    const unsigned int c = t % {{ channels }}u;
    const unsigned int o = t / {{ channels }}u;
    const int e = tab[c];
    const unsigned int at = e & 0xFFFFF;
    switch (e >> 20) {
{% for i in range(n - 1) %}    case {{ i }}: dst[i] = s{{ i }}[(o * {{ sizes[i] }}u + at) * {{ inner }}u + r]; break;
{% endfor %}    default: dst[i] = s{{ n - 1 }}[(o * {{ sizes[n - 1] }}u + at) * {{ inner }}u + r];
    }
}
