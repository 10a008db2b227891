// GPU SwiGLU and residual add (elementwise_gpu.h): grid-stride loops, one element a step.
#include <cstdint>

#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

__global__ void __launch_bounds__(kThreads) swiglu_kernel(const float* gate, const float* up, float* y, int64_t n) {
  gpu::begin_kernel();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void __launch_bounds__(kThreads) add_kernel(const float* a, const float* b, float* y, int64_t n) {
  gpu::begin_kernel();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = a[i] + b[i];
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

}  // namespace

gpuError_t swiglu_gpu(const float* gate, const float* up, float* y, int64_t n, gpuStream_t stream) {
  if (n < 0) return gpuErrorInvalidValue;
  if (n == 0) return gpuSuccess;
  gpu::launch(swiglu_kernel, blocks_for(n), kThreads, 0, stream, gate, up, y, n);
  return gpuGetLastError();
}

gpuError_t add_gpu(const float* a, const float* b, float* y, int64_t n, gpuStream_t stream) {
  if (n < 0) return gpuErrorInvalidValue;
  if (n == 0) return gpuSuccess;
  gpu::launch(add_kernel, blocks_for(n), kThreads, 0, stream, a, b, y, n);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
