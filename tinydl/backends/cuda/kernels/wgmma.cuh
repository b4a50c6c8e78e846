// Hopper warpgroup MMA (sm_90a): wgmma.mma_async with both operands in shared memory, K-major
// without swizzling. An operand is a grid of 8x8 core matrices, each 8 rows (M or N) of 8
// contiguous K values (16 bytes a row, 128 contiguous bytes a core matrix); its descriptor
// holds the start address, the byte offset between core matrices adjacent along K (leading)
// and along M or N (stride). The accumulators: f32, each warp's 16 rows of the m64 tile laid
// out as mma.sync's C fragments of the N/8 n8 tiles in order.
{% raw %}
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// Shared-memory matrix descriptor, no swizzling (addresses and offsets in bytes, multiples of
// 16). Adding n to it moves its start by 16 n bytes.
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr, unsigned lead, unsigned stride) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32);
}
// Shared memory written by ordinary stores that wgmma reads next (the async proxy) is fenced
// by each writing thread before the barrier.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int N> struct Wgmma;
{% endraw %}
{% for n in wgmma_ns %}
{% set h = n // 2 %}
template <> struct Wgmma<{{ n }}> {
{% for name, io, scale in (("mma", "+f", 1), ("mma0", "=f", 0)) %}
    // {{ "d += a b" if scale else "d = a b (d's values are not read: no zeroing first)" }}: A in
    // shared memory (a descriptor), or in registers (_rs: mma.sync's A fragment of each warp's
    // 16 rows)
    static __device__ __forceinline__ void {{ name }}(float* d, unsigned long long a, unsigned long long b) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %{{ h + 2 }}, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.f16.f16 "
            "{{ "{" }}{% for i in range(h) %}%{{ i }}{{ "," if not loop.last }}{% endfor %}{{ "}" }}, "
            "%{{ h }}, %{{ h + 1 }}, p, 1, 1, 0, 0;\n}\n"
            : {% for i in range(h) %}"{{ io }}"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
            : "l"(a), "l"(b), "n"({{ scale }}));
    }
    static __device__ __forceinline__ void {{ name }}_rs(float* d, const unsigned* a, unsigned long long b) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %{{ h + 5 }}, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.f16.f16 "
            "{{ "{" }}{% for i in range(h) %}%{{ i }}{{ "," if not loop.last }}{% endfor %}{{ "}" }}, "
            "{{ "{" }}%{{ h }},%{{ h + 1 }},%{{ h + 2 }},%{{ h + 3 }}{{ "}" }}, %{{ h + 4 }}, p, 1, 1, 0;\n}\n"
            : {% for i in range(h) %}"{{ io }}"(d[{{ i }}]){{ ", " if not loop.last }}{% endfor %}
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"({{ scale }}));
    }
{% endfor %}
};
{% endfor %}
{% raw %}
// Issues (without waiting) one warpgroup's MB m64 tiles of a convolution over the previous
// layer's tile in shared memory, stored as planes of 8 channels (16 bytes a pixel, PLANE bytes
// a plane) with rows WP pixels apart: M row r reads pixel r + tap offset, so a tap is a move
// of the A descriptor (rows past the region's width compute values nobody keeps). K chunk
// kc = tap * CC + cc: tap (tap / KK, tap % KK), channels 16 cc to 16 cc + 15 (two planes).
// B: NK chunks of N * 32 bytes from `b_addr` (per chunk, N/8 blocks of two core matrices).
// Only the first `count` tiles are issued (a value the whole warpgroup shares).
template <int N, int MB, int NK, int CC, int KK, int WP, int PLANE>
__device__ __forceinline__ void wg_conv(float (&acc)[MB][N / 2], const int (&row0)[MB], unsigned a_addr,
                                        unsigned b_addr, int count = MB) {
    const unsigned long long bd = wgmma_desc(b_addr, 128, 256);
    unsigned long long ad[MB];
#pragma unroll
    for (int m = 0; m < MB; ++m) ad[m] = wgmma_desc(a_addr + row0[m] * 16, PLANE, 128);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < NK; ++kc) {
        const int tap = kc / CC, cc = kc % CC;
        const unsigned a_off = (((tap / KK) * WP + tap % KK) * 16 + cc * 2 * PLANE) >> 4;
        const unsigned b_off = (kc * N * 32) >> 4;
#pragma unroll
        for (int m = 0; m < MB; ++m) {
            if (m >= count) break;
            if (kc == 0)
                Wgmma<N>::mma0(acc[m], ad[m] + a_off, bd + b_off);
            else
                Wgmma<N>::mma(acc[m], ad[m] + a_off, bd + b_off);
        }
    }
    wgmma_commit();
}
{% endraw %}
