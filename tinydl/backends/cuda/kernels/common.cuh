// tinydl CUDA prelude: storage types and helpers, pasted at the top of every kernel.
typedef unsigned short half_t;  // IEEE fp16 bits; converted with PTX cvt (no cuda_fp16.h)

__device__ __forceinline__ float h2f(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ half_t f2h(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float sigmoid_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float leaky_(float x, float a) { return x >= 0.0f ? x : x * a; }
// Clamps by comparison, not fminf/fmaxf (which drop a NaN): a NaN passes through, as in NumPy.
__device__ __forceinline__ float clamp01_(float y) { return y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y); }
__device__ __forceinline__ float hard_sigmoid_(float x, float a, float b) {
    return clamp01_(x * a + b);
}
__device__ __forceinline__ float hard_swish_(float x) {
    return x * clamp01_(x * (1.0f / 6.0f) + 0.5f);
}
// NumPy's power: a negative base gives a real result for integral exponents, NaN otherwise.
__device__ __forceinline__ float pow_(float a, float b) {
    if (b == 0.0f) return 1.0f;
    float r = powf(fabsf(a), b);
    if (a < 0.0f) {
        if (rintf(b) != b) return __int_as_float(0x7fc00000);
        if (fmodf(fabsf(b), 2.0f) == 1.0f) r = -r;
    }
    return r;
}

// log(1 + e^x) without overflow.
__device__ __forceinline__ float softplus_(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }
// Min and Max pass a NaN on (fminf and fmaxf drop it), as NumPy does.
__device__ __forceinline__ float min_(float a, float b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ float max_(float a, float b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T min_(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T max_(T a, T b) { return a > b ? a : b; }
// Integer remainders; a zero divisor gives 0, not a trap. trunc_mod_ has the dividend's sign
// (C, ONNX fmod=1), floor_mod_ the divisor's (ONNX fmod=0).
template <typename T> __device__ __forceinline__ T trunc_mod_(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }
template <typename T> __device__ __forceinline__ T floor_mod_(T a, T b) {
    const T r = trunc_mod_(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;
}

// Warp and block reductions (softmax, normalizations, reduce). Every thread of the block calls a
// block_ one (no thread has returned) and gets the result; `part` holds one float per warp.
#define NEG_INF_ __int_as_float(0xff800000)
__device__ __forceinline__ float warp_sum_(float v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}
__device__ __forceinline__ float warp_max_(float v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
__device__ __forceinline__ float block_sum_(float v, float* part) {
    const unsigned lane = threadIdx.x & 31u;
    v = warp_sum_(v);
    if (lane == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_sum_(lane < (blockDim.x >> 5) ? part[lane] : 0.0f);
    __syncthreads();  // part is reused by the next reduction
    return v;
}
__device__ __forceinline__ float block_max_(float v, float* part) {
    const unsigned lane = threadIdx.x & 31u;
    v = warp_max_(v);
    if (lane == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_max_(lane < (blockDim.x >> 5) ? part[lane] : NEG_INF_);
    __syncthreads();
    return v;
}
