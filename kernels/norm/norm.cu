// GPU RMSNorm and gated RMSNorm (norm_gpu.h): one block per row / group, the block-level
// functions of norm_block.h (shared with gdn_step_gpu's fused gated norm). Each thread owns
// elements tid, tid + blockDim, ... of its row for both passes, so y aliasing x is safe: a
// thread only overwrites elements it alone read.
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/norm/norm_block.h"
#include "kernels/norm/norm_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = detail::kNormMaxThreads;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const RmsNormArgs a) {
  gpu::begin_kernel();
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const float* x = a.x + blockIdx.x * a.x_stride;
  float* y = a.y + blockIdx.x * a.y_stride;
  const float scale = detail::block_inverse_rms(x, a.n, a.eps, scratch);
  detail::block_norm_write(x, y, a.n, [&](int64_t i, float v) { return detail::rms_normed(v, scale, a.w[i]); });
}

// rms_norm_kernel's bits for rows of at most kPerThread * blockDim.x elements, each thread's x
// and w loaded at once and held: one round trip to L2 for the row instead of one per batch and
// pass (the 27B's 5,120-wide norms, 129 per decode step). Same per-thread order, block_sum and
// expression as block_inverse_rms / block_norm_write.
template <int kPerThread>
__global__ void __launch_bounds__(kThreads) rms_norm_held_kernel(const RmsNormArgs a) {
  gpu::begin_kernel();
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const float* x = a.x + blockIdx.x * a.x_stride;
  float* y = a.y + blockIdx.x * a.y_stride;
  const int64_t stride = blockDim.x;
  float v[kPerThread], w[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = threadIdx.x + k * stride;
    v[k] = i < a.n ? x[i] : 0.0f;
    w[k] = i < a.n ? a.w[i] : 0.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    if (threadIdx.x + k * stride < a.n) sum = fmaf(v[k], v[k], sum);
  }
  sum = gpu::block_sum(sum, scratch);
  const float scale = 1.0f / sqrtf(sum / static_cast<float>(a.n) + a.eps);
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = threadIdx.x + k * stride;
    if (i < a.n) y[i] = detail::rms_normed(v[k], scale, w[k]);
  }
}

// y = x / rms(x) * w * SiLU(z) per group of n.
__global__ void __launch_bounds__(kThreads) gated_rms_norm_kernel(const GatedRmsNormArgs a) {
  gpu::begin_kernel();
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const int64_t g = blockIdx.x;
  detail::block_gated_rms_norm(a.x + g * a.n, a.z + g * a.n, a.w, a.y + g * a.n, a.n, a.eps, scratch);
}

}  // namespace

gpuError_t rms_norm_gpu(const RmsNormArgs& a, gpuStream_t stream) {
  if (a.n <= 0 || a.num_rows < 0) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  const unsigned threads = detail::norm_threads_for(a.n);
  if (a.n <= 8 * static_cast<int64_t>(threads))
    gpu::launch(rms_norm_held_kernel<8>, static_cast<unsigned>(a.num_rows), threads, 0, stream, a);
  else if (a.n <= 32 * static_cast<int64_t>(threads))
    gpu::launch(rms_norm_held_kernel<32>, static_cast<unsigned>(a.num_rows), threads, 0, stream, a);
  else
    gpu::launch(rms_norm_kernel, static_cast<unsigned>(a.num_rows), threads, 0, stream, a);
  return gpuGetLastError();
}

gpuError_t gated_rms_norm_gpu(const GatedRmsNormArgs& a, gpuStream_t stream) {
  if (a.n <= 0 || a.num_groups < 0) return gpuErrorInvalidValue;
  if (a.num_groups == 0) return gpuSuccess;
  gpu::launch(gated_rms_norm_kernel, static_cast<unsigned>(a.num_groups), detail::norm_threads_for(a.n), 0, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
