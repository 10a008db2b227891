// Row gather and MoE combine (step_ops_gpu.h): one thread per output element; the combine
// with the norm epilogue either a row per block (rows of up to 8 x 256 elements, up to 8
// ranks) or in blocks of one row's elements, the row's last block normalising it.
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/norm/norm_block.h"
#include "kernels/step_ops/step_ops_gpu.h"

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

// Ranks a combine keeps in registers (every load issued before the first add: one round trip
// to L2, not one per rank); more ranks run the rolled loop. Either way the same operations in
// the same order, so the same bits.
constexpr int kUnrolledRanks = 8;

// acc of element (r, c) (before the residual), from its loaded inputs, in rank order.
__device__ __forceinline__ float combine_sum(const MoeCombineArgs& a, const float (&w)[kUnrolledRanks],
                                             const float (&e)[kUnrolledRanks], float gate, float shared) {
  float acc = 0.0f;
#pragma unroll
  for (int rank = 0; rank < kUnrolledRanks; ++rank) {
    if (rank < a.num_used) acc = __fadd_rn(acc, __fmul_rn(w[rank], e[rank]));
  }
  if (a.shared != nullptr) acc = __fadd_rn(acc, __fmul_rn(gate, shared));
  return acc;
}

__device__ __forceinline__ float shared_gate(const MoeCombineArgs& a, int64_t r) {
  return a.shared != nullptr ? 1.0f / (1.0f + expf(-a.shared_gate_logit[r])) : 0.0f;
}

// Element (r, c) of the combine, written to y: the plain and the multi-block norm kernels run
// this; the one-block row form runs combine_sum on the same loaded values.
__device__ __forceinline__ void combine_element(const MoeCombineArgs& a, int64_t r, int64_t c) {
  float* y = a.y + r * a.n + c;
  if (a.num_used <= kUnrolledRanks) {
    float w[kUnrolledRanks], e[kUnrolledRanks];
#pragma unroll
    for (int rank = 0; rank < kUnrolledRanks; ++rank) {
      const bool used = rank < a.num_used;
      w[rank] = used ? a.weights[r * a.num_used + rank] : 0.0f;
      e[rank] = used ? a.expert_out[(r * a.num_used + rank) * a.n + c] : 0.0f;
    }
    const float shared = a.shared != nullptr ? a.shared[r * a.n + c] : 0.0f;
    const float acc = combine_sum(a, w, e, shared_gate(a, r), shared);
    *y = a.accumulate ? *y + acc : acc;
    return;
  }
  float acc = 0.0f;
  for (int64_t rank = 0; rank < a.num_used; ++rank) {
    const float w = a.weights[r * a.num_used + rank];
    acc = __fadd_rn(acc, __fmul_rn(w, a.expert_out[(r * a.num_used + rank) * a.n + c]));
  }
  if (a.shared != nullptr) acc = __fadd_rn(acc, __fmul_rn(shared_gate(a, r), a.shared[r * a.n + c]));
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
// doing the whole combine, several times slower than the combine and norm launches it replaced.
__global__ void __launch_bounds__(kThreads) moe_combine_norm_kernel(const MoeCombineArgs a) {
  gpu::begin_kernel();
  __shared__ unsigned last;
  __shared__ float scratch[detail::kNormMaxThreads / gpu::kWarpSize];
  const int64_t r = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c < a.n) {
    combine_element(a, r, c);
    gpu::fence_acq_rel_device();  // this element visible device-wide before the row's count
  }
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.norm_counters + r, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  gpu::fence_acq_rel_device();
  detail::block_rms_norm_as_norm_gpu(a.y + r * a.n, a.norm_w, a.norm_out + r * a.norm_out_stride, a.n, a.norm_eps,
                                     scratch);
  if (threadIdx.x == 0) a.norm_counters[r] = 0;
}

// The norm epilogue with a row in one block (norm_rows_cacheable(n), at most kUnrolledRanks
// ranks): block = norm_threads_for(n) threads, thread t owning elements t + k * T as
// rms_norm_gpu's thread t does; each thread issues every load of its elements (ranks, shared
// expert, residual) before the first add, keeps the sums in registers for the norm, and the
// block reduces as rms_norm_gpu does. No cross-block handshake: at one row the 8-block form
// spent most of its time in the last block's two passes over y from L2.
__global__ void __launch_bounds__(detail::kNormMaxThreads) moe_combine_norm_row_kernel(const MoeCombineArgs a) {
  if (blockIdx.x == 0) gpu::prefetch_l2_range(a.norm_w, static_cast<size_t>(a.n) * sizeof(float));
  gpu::begin_kernel();
  constexpr int K = detail::kNormRowsCached;
  __shared__ float scratch[detail::kNormMaxThreads / gpu::kWarpSize];
  const int64_t r = blockIdx.x;
  const int T = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  const int64_t n = a.n;
  float w[kUnrolledRanks];
#pragma unroll
  for (int rank = 0; rank < kUnrolledRanks; ++rank) w[rank] = rank < a.num_used ? a.weights[r * a.num_used + rank] : 0.0f;
  const float gate = shared_gate(a, r);
  float e[K][kUnrolledRanks], sh[K], y0[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = t + static_cast<int64_t>(k) * T;
    const bool valid = i < n;
#pragma unroll
    for (int rank = 0; rank < kUnrolledRanks; ++rank) {
      e[k][rank] = valid && rank < a.num_used ? a.expert_out[(r * a.num_used + rank) * n + i] : 0.0f;
    }
    sh[k] = valid && a.shared != nullptr ? a.shared[r * n + i] : 0.0f;
    y0[k] = valid && a.accumulate ? a.y[r * n + i] : 0.0f;
  }
  float v[1][K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = t + static_cast<int64_t>(k) * T;
    const float acc = combine_sum(a, w, e[k], gate, sh[k]);
    v[0][k] = a.accumulate ? y0[k] + acc : acc;
    if (i < n) a.y[r * n + i] = v[0][k];
  }
  detail::block_rms_norm_held_rows<1>(v, 1, a.norm_w, a.norm_out + r * a.norm_out_stride, 0, n, a.norm_eps, scratch);
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
  if (norm && a.num_used <= kUnrolledRanks && detail::norm_rows_cacheable(a.n)) {
    gpu::launch(moe_combine_norm_row_kernel, static_cast<unsigned>(a.num_rows), detail::norm_threads_for(a.n), 0, stream, a);
  } else if (norm) {
    const dim3 grid(static_cast<unsigned>((a.n + kThreads - 1) / kThreads), static_cast<unsigned>(a.num_rows));
    gpu::launch(moe_combine_norm_kernel, grid, kThreads, 0, stream, a);
  } else {
    gpu::launch(moe_combine_kernel, blocks_for(a.num_rows * a.n), kThreads, 0, stream, a);
  }
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
