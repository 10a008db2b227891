// Row gather and MoE combine (step_ops_gpu.h): one thread per output element.
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/step_ops_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const float* src, int64_t src_stride,
                                                               const int32_t* rows, int64_t num_rows,
                                                               int64_t width, float* dst, int64_t dst_stride) {
  const int64_t total = num_rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / width, c = i % width;
    dst[r * dst_stride + c] = src[static_cast<int64_t>(rows[r]) * src_stride + c];
  }
}

__global__ void __launch_bounds__(kThreads) moe_combine_kernel(const MoeCombineArgs a) {
  const int64_t total = a.num_rows * a.n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / a.n, c = i % a.n;
    float acc = 0.0f;
    for (int64_t rank = 0; rank < a.num_used; ++rank) {
      const float w = a.weights[r * a.num_used + rank];
      acc = __fadd_rn(acc, __fmul_rn(w, a.expert_out[(r * a.num_used + rank) * a.n + c]));
    }
    if (a.shared != nullptr) {
      const float gate = 1.0f / (1.0f + expf(-a.shared_gate_logit[r]));
      acc = __fadd_rn(acc, __fmul_rn(gate, a.shared[r * a.n + c]));
    }
    float* y = a.y + r * a.n + c;
    *y = a.accumulate ? *y + acc : acc;
  }
}

}  // namespace

gpuError_t gather_rows_gpu(const float* src, int64_t src_stride, const int32_t* rows, int64_t num_rows,
                           int64_t width, float* dst, int64_t dst_stride, gpuStream_t stream) {
  if (num_rows < 0 || width < 0 || src_stride < width || dst_stride < width) return gpuErrorInvalidValue;
  if (num_rows == 0 || width == 0) return gpuSuccess;
  gather_rows_kernel<<<blocks_for(num_rows * width), kThreads, 0, stream>>>(src, src_stride, rows, num_rows, width,
                                                                            dst, dst_stride);
  return gpuGetLastError();
}

gpuError_t moe_combine_gpu(const MoeCombineArgs& a, gpuStream_t stream) {
  if (a.num_rows < 0 || a.num_used < 1 || a.n < 0 || (a.shared != nullptr && a.shared_gate_logit == nullptr))
    return gpuErrorInvalidValue;
  if (a.num_rows == 0 || a.n == 0) return gpuSuccess;
  moe_combine_kernel<<<blocks_for(a.num_rows * a.n), kThreads, 0, stream>>>(a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
