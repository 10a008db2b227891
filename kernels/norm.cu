// GPU RMSNorm and gated RMSNorm (norm_gpu.h). Each thread owns elements tid, tid + blockDim,
// ... of its row for both passes, so y aliasing x is safe: a thread only overwrites elements
// it alone read.
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/norm_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float inverse_rms(const float* x, int64_t n, float eps, float* scratch) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum = fmaf(x[i], x[i], sum);
  sum = gpu::block_sum(sum, scratch);
  return 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
}

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const RmsNormArgs a) {
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const float* x = a.x + blockIdx.x * a.x_stride;
  float* y = a.y + blockIdx.x * a.y_stride;
  const float scale = inverse_rms(x, a.n, a.eps, scratch);
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) y[i] = __fmul_rn(x[i], scale) * a.w[i];
}

// y = x / rms(x) * w * SiLU(z) per group of n.
__global__ void __launch_bounds__(kThreads) gated_rms_norm_kernel(const GatedRmsNormArgs a) {
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const int64_t g = blockIdx.x;
  const float* x = a.x + g * a.n;
  const float* z = a.z + g * a.n;
  float* y = a.y + g * a.n;
  const float scale = inverse_rms(x, a.n, a.eps, scratch);
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
    y[i] = __fmul_rn(__fmul_rn(x[i], scale), a.w[i]) * gpu::siluf_(z[i]);
  }
}

// Threads per block: the row width rounded up to a warp multiple, at most kThreads. A fixed
// function of n, so the reduction order never depends on the batch.
unsigned threads_for(int64_t n) {
  const int64_t t = ((n + 63) / 64) * 64;
  return static_cast<unsigned>(t < kThreads ? t : kThreads);
}

}  // namespace

gpuError_t rms_norm_gpu(const RmsNormArgs& a, gpuStream_t stream) {
  if (a.n <= 0 || a.num_rows < 0) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  rms_norm_kernel<<<static_cast<unsigned>(a.num_rows), threads_for(a.n), 0, stream>>>(a);
  return gpuGetLastError();
}

gpuError_t gated_rms_norm_gpu(const GatedRmsNormArgs& a, gpuStream_t stream) {
  if (a.n <= 0 || a.num_groups < 0) return gpuErrorInvalidValue;
  if (a.num_groups == 0) return gpuSuccess;
  gated_rms_norm_kernel<<<static_cast<unsigned>(a.num_groups), threads_for(a.n), 0, stream>>>(a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
