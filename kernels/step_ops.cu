// Row gather and MoE combine (step_ops_gpu.h): one thread per output element; the combine
// with the norm epilogue one block per row (the norm's reduction is per row).
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/step_ops_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kMaxNormRows = 2147483647;  // grid.x limit of the one-block-per-row form

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

// Element (r, c) of the combine, written to y; both kernels run this one sequence.
__device__ __forceinline__ void combine_element(const MoeCombineArgs& a, int64_t r, int64_t c) {
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

__global__ void __launch_bounds__(kThreads) moe_combine_kernel(const MoeCombineArgs a) {
  const int64_t total = a.num_rows * a.n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    combine_element(a, i / a.n, i % a.n);
  }
}

// The norm epilogue reproduces norm.cu's rms_norm_gpu bit for bit: its threads per block
// (the row width rounded up to 64, at most 256), its per-thread fmaf partials over elements t,
// t + blockDim, ..., gpu::block_sum, the scale 1 / sqrt(sum / n + eps) and the product
// (x * scale) * w. Keep the two in step (tests/gpu/moe_fused_test.cu checks it bitwise).
constexpr int kNormMaxThreads = 256;
unsigned norm_threads_for(int64_t n) {
  const int64_t t = ((n + 63) / 64) * 64;
  return static_cast<unsigned>(t < kNormMaxThreads ? t : kNormMaxThreads);
}

// With the norm epilogue: one block per row of norm_threads_for(n) threads, thread t owning
// elements t, t + blockDim, ... It writes its y elements, then reads them back (its own
// writes) for the sum of squares and the normalisation, as rms_norm_gpu reads y.
__global__ void __launch_bounds__(kNormMaxThreads) moe_combine_norm_kernel(const MoeCombineArgs a) {
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  const int64_t r = blockIdx.x;
  for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x) combine_element(a, r, c);
  const float* y = a.y + r * a.n;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x) sum = fmaf(y[c], y[c], sum);
  sum = gpu::block_sum(sum, scratch);
  const float scale = 1.0f / sqrtf(sum / static_cast<float>(a.n) + a.norm_eps);
  float* out = a.norm_out + r * a.norm_out_stride;
  for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x) out[c] = __fmul_rn(y[c], scale) * a.norm_w[c];
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
  const bool norm = a.norm_w != nullptr;
  if (norm && (a.norm_out == nullptr || a.norm_out_stride < a.n || a.n == 0 || a.num_rows > kMaxNormRows))
    return gpuErrorInvalidValue;
  if (!norm && a.norm_out != nullptr) return gpuErrorInvalidValue;
  if (a.num_rows == 0 || a.n == 0) return gpuSuccess;
  if (norm) {
    moe_combine_norm_kernel<<<static_cast<unsigned>(a.num_rows), norm_threads_for(a.n), 0, stream>>>(a);
  } else {
    moe_combine_kernel<<<blocks_for(a.num_rows * a.n), kThreads, 0, stream>>>(a);
  }
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
