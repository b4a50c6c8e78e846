// {{ label }}: the {{ K }} {{ "largest" if largest else "smallest" }} of {{ L }} elements (stride {{ inner }}) for each of {{ rows }} rows,
// in order, equal values by index; a block per row makes a pass per output: the first element (in
// that order) after the one the last pass found, by warp shuffles and one exchange through
// shared memory.
#define NONE_ 0xffffffffu

// (a, ia) comes before (b, ib); NONE_ (no element) comes after every element.
__device__ __forceinline__ bool before_({{ acc }} a, unsigned ia, {{ acc }} b, unsigned ib) {
    if (ia == NONE_ || ib == NONE_) return ib == NONE_ && ia != NONE_;
    return a {{ ">" if largest else "<" }} b || (a == b && ia < ib);
}
__device__ __forceinline__ void warp_first_({{ acc }}& v, unsigned& i) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        const {{ acc }} w = __shfl_xor_sync(0xffffffffu, v, d);
        const unsigned j = __shfl_xor_sync(0xffffffffu, i, d);
        if (before_(w, j, v, i)) {
            v = w;
            i = j;
        }
    }
}

extern "C" __global__ void __launch_bounds__({{ T }}) k(
    const {{ xt }}* __restrict__ x,
    {{ yt }}* __restrict__ y,
    {{ it }}* __restrict__ idx)
{
    __shared__ {{ acc }} part[{{ warps }}];
    __shared__ unsigned ipart[{{ warps }}];
    const unsigned t = threadIdx.x, lane = t & 31u;
    const unsigned long long row = blockIdx.x;
    const unsigned long long base = (row / {{ inner }}u) * {{ L * inner }}ull + row % {{ inner }}u;
    const unsigned long long out = (row / {{ inner }}u) * {{ K * inner }}ull + row % {{ inner }}u;
    {{ acc }} pv = 0;
    unsigned pi = NONE_;
    for (unsigned j = 0; j < {{ K }}u; ++j) {
        {{ acc }} bv = 0;
        unsigned bi = NONE_;
        for (unsigned r = t; r < {{ L }}u; r += {{ T }}u) {
            const {{ acc }} v = {{ xload }};
            if ((pi == NONE_ || before_(pv, pi, v, r)) && before_(v, r, bv, bi)) {
                bv = v;
                bi = r;
            }
        }
        warp_first_(bv, bi);
        if (lane == 0) {
            part[t >> 5] = bv;
            ipart[t >> 5] = bi;
        }
        __syncthreads();
        bv = lane < {{ warps }}u ? part[lane] : ({{ acc }})0;
        bi = lane < {{ warps }}u ? ipart[lane] : NONE_;
        warp_first_(bv, bi);
        __syncthreads();  // part is reused by the next pass
        pv = bv;
        pi = bi;
        if (t == 0) {
            y[out + (unsigned long long)j * {{ inner }}u] = {{ ystore }};
            idx[out + (unsigned long long)j * {{ inner }}u] = ({{ it }})pi;
        }
    }
}
