// Internal to the GPU kernels (included by .cu files only): one block normalises one row /
// group, the device half of norm_gpu.h. Shared by norm.cu (rms_norm_gpu, gated_rms_norm_gpu)
// and gdn.cu (gdn_step_gpu's fused gated-norm epilogue), so both run the same f32 operations in
// the same order and agree bitwise.
//
// Reduction order: thread t sums x[t], x[t + blockDim], ... (fmaf from 0), then gpu::block_sum
// (warp butterflies, warp totals added in warp order from 0). Threads without elements add
// zeros, and warps past the row's last element add exact zeros at the end, so for n <=
// blockDim the result depends only on n and the warp width, not on blockDim: a 128-thread
// block reproduces norm_threads_for(n) threads bit for bit whenever n <= 128.
#pragma once

#include <cstdint>

#include "kernels/gpu_compat.h"

namespace deltaserve::kernels::detail {

inline constexpr int kNormMaxThreads = 256;

// Threads per norm block: the row width rounded up to 64, at most kNormMaxThreads. A fixed
// function of n, so the reduction order never depends on the batch.
constexpr unsigned norm_threads_for(int64_t n) {
  const int64_t t = ((n + 63) / 64) * 64;
  return static_cast<unsigned>(t < kNormMaxThreads ? t : kNormMaxThreads);
}

// 1 / sqrt(mean(x^2) + eps) over x[0, n); every thread of the block calls it and gets the
// same bits. scratch: gpu::kMaxWarpsPerBlock floats of shared memory.
__device__ __forceinline__ float block_inverse_rms(const float* x, int64_t n, float eps, float* scratch) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum = fmaf(x[i], x[i], sum);
  sum = gpu::block_sum(sum, scratch);
  return 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
}

// y = x / rms(x) * w * SiLU(z) over one group of n. y may alias x: each thread overwrites only
// the elements it alone read.
__device__ __forceinline__ void block_gated_rms_norm(const float* x, const float* z, const float* w, float* y, int64_t n,
                                                     float eps, float* scratch) {
  const float scale = block_inverse_rms(x, n, eps, scratch);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    y[i] = __fmul_rn(__fmul_rn(x[i], scale), w[i]) * gpu::siluf_(z[i]);
  }
}

}  // namespace deltaserve::kernels::detail
