// Row gather and MoE combine (step_ops_gpu.h): one thread per output element; the combine
// with the norm epilogue in blocks of one row, the row's last block normalising it.
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/norm_block.h"
#include "kernels/step_ops_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kMaxNormRows = 65535;  // grid.y limit of the norm form (one grid row per row)

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const float* src, int64_t src_stride,
                                                               const int32_t* rows, int64_t num_rows,
                                                               int64_t width, float* dst, int64_t dst_stride) {
  gpu::begin_kernel();
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
  gpu::begin_kernel();
  const int64_t total = a.num_rows * a.n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    combine_element(a, i / a.n, i % a.n);
  }
}

// The norm epilogue: blocks of kThreads elements of one row (grid.y = row) combine as the plain
// kernel does; the last block of a row to finish normalises the row with norm_block.h's
// emulation of rms_norm_gpu (its thread count and reduction order: the same bits), then
// resets the row's counter. Why not one block per row: at one row that was a single block
// doing the whole combine (H200: 19.5 us per launch against 5.3 for combine + norm).
__global__ void __launch_bounds__(kThreads) moe_combine_norm_kernel(const MoeCombineArgs a) {
  gpu::begin_kernel();
  __shared__ unsigned last;
  __shared__ float scratch[detail::kNormMaxThreads / gpu::kWarpSize];
  const int64_t r = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c < a.n) {
    combine_element(a, r, c);
    __threadfence();  // this element visible device-wide before the row's count
  }
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.norm_counters + r, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  detail::block_rms_norm_as_norm_gpu(a.y + r * a.n, a.norm_w, a.norm_out + r * a.norm_out_stride, a.n, a.norm_eps,
                                     scratch);
  if (threadIdx.x == 0) a.norm_counters[r] = 0;
}

}  // namespace

gpuError_t gather_rows_gpu(const float* src, int64_t src_stride, const int32_t* rows, int64_t num_rows,
                           int64_t width, float* dst, int64_t dst_stride, gpuStream_t stream) {
  if (num_rows < 0 || width < 0 || src_stride < width || dst_stride < width) return gpuErrorInvalidValue;
  if (num_rows == 0 || width == 0) return gpuSuccess;
  gpu::launch(gather_rows_kernel, blocks_for(num_rows * width), kThreads, 0, stream, src, src_stride, rows, num_rows,
              width, dst, dst_stride);
  return gpuGetLastError();
}

gpuError_t moe_combine_gpu(const MoeCombineArgs& a, gpuStream_t stream) {
  if (a.num_rows < 0 || a.num_used < 1 || a.n < 0 || (a.shared != nullptr && a.shared_gate_logit == nullptr))
    return gpuErrorInvalidValue;
  const bool norm = a.norm_w != nullptr;
  if (norm && (a.norm_out == nullptr || a.norm_counters == nullptr || a.norm_out_stride < a.n || a.n == 0 ||
               a.num_rows > kMaxNormRows))
    return gpuErrorInvalidValue;
  if (!norm && a.norm_out != nullptr) return gpuErrorInvalidValue;
  if (a.num_rows == 0 || a.n == 0) return gpuSuccess;
  if (norm) {
    const dim3 grid(static_cast<unsigned>((a.n + kThreads - 1) / kThreads), static_cast<unsigned>(a.num_rows));
    gpu::launch(moe_combine_norm_kernel, grid, kThreads, 0, stream, a);
  } else {
    gpu::launch(moe_combine_kernel, blocks_for(a.num_rows * a.n), kThreads, 0, stream, a);
  }
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
