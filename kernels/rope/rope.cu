// GPU partial NeoX RoPE (rope_gpu.h): one block per row, one thread per (head, pair i).
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/rope/rope_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rope_neox_kernel(const RopeArgs a) {
  gpu::begin_kernel();
  const int64_t half = a.rope_dims / 2;
  const int64_t r = blockIdx.x;
  const float pos = static_cast<float>(a.positions[r]);
  for (int64_t item = threadIdx.x; item < a.num_heads * half; item += blockDim.x) {
    const int64_t h = item / half, i = item % half;
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(a.rope_dims);
    const float power = static_cast<float>(pow(static_cast<double>(a.base), static_cast<double>(exponent)));
    const float angle = pos * (1.0f / power);
    float s, c;
    sincosf(angle, &s, &c);
    float* x = a.x + r * a.row_stride + h * a.head_stride;
    const float x0 = x[i], x1 = x[i + half];
    x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    x[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
}

}  // namespace

gpuError_t rope_neox_gpu(const RopeArgs& a, gpuStream_t stream) {
  if (a.rope_dims <= 0 || a.rope_dims % 2 != 0 || a.num_heads < 0 || a.num_rows < 0) return gpuErrorInvalidValue;
  if (a.num_rows == 0 || a.num_heads == 0) return gpuSuccess;
  gpu::launch(rope_neox_kernel, static_cast<unsigned>(a.num_rows), kThreads, 0, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
