// GPU RMSNorm and gated RMSNorm (norm_gpu.h): one block per row / group, the block-level
// functions of norm_block.h (shared with gdn_step_gpu's fused gated norm). Each thread owns
// elements tid, tid + blockDim, ... of its row for both passes, so y aliasing x is safe: a
// thread only overwrites elements it alone read.
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/norm_block.h"
#include "kernels/norm_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = detail::kNormMaxThreads;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const RmsNormArgs a) {
  gpu::begin_kernel();
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const float* x = a.x + blockIdx.x * a.x_stride;
  float* y = a.y + blockIdx.x * a.y_stride;
  const float scale = detail::block_inverse_rms(x, a.n, a.eps, scratch);
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) y[i] = __fmul_rn(x[i], scale) * a.w[i];
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
  gpu::launch(rms_norm_kernel, static_cast<unsigned>(a.num_rows), detail::norm_threads_for(a.n), 0, stream, a);
  return gpuGetLastError();
}

gpuError_t gated_rms_norm_gpu(const GatedRmsNormArgs& a, gpuStream_t stream) {
  if (a.n <= 0 || a.num_groups < 0) return gpuErrorInvalidValue;
  if (a.num_groups == 0) return gpuSuccess;
  gpu::launch(gated_rms_norm_kernel, static_cast<unsigned>(a.num_groups), detail::norm_threads_for(a.n), 0, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
