// float32 weights split in place into two tf32 parts for 3xTF32 (conv_tc.cu): w[i] becomes
// the weight rounded to tf32 (big), w[n + i] the rest rounded (small), both to nearest with
// ties away from zero as kernels/conv.py's to_tf32 rounds on the host. A weight that would
// round to infinity, or is not finite, stays itself. Plain CUDA, not a template: a session
// read back from the cache splits its weights without rendering any source.
__device__ __forceinline__ float tf32_rna(float f) {  // (mma.cuh's to_tf32)
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(f));
    return __uint_as_float(u);
}

extern "C" __global__ void split_tf32(float* __restrict__ w, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const float f = w[i];
        const float r = tf32_rna(f);
        const float big = isfinite(r) ? r : f;
        const float rest = f - big;
        const float s = tf32_rna(rest);
        w[i] = big;
        w[n + i] = isfinite(s) ? s : rest;
    }
}
