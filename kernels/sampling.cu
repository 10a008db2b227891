// Greedy argmax and draft verification (sampling_gpu.h).
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/sampling_gpu.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t stride, int64_t vocab, int32_t* ids) {
  __shared__ float best_v[gpu::kMaxWarpsPerBlock];
  __shared__ int best_i[gpu::kMaxWarpsPerBlock];
  const float* row = logits + blockIdx.x * stride;
  float v = -INFINITY;
  int i = 0x7fffffff;
  // Each thread scans its strided ids in increasing order; strict '>' keeps the lowest.
  for (int64_t e = threadIdx.x; e < vocab; e += blockDim.x) {
    const float x = row[e];
    if (gpu::arg_better(x, static_cast<int>(e), v, i)) v = x, i = static_cast<int>(e);
  }
  gpu::warp_argmax(v, i);
  if (gpu::lane_id() == 0) best_v[gpu::warp_id()] = v, best_i[gpu::warp_id()] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    float bv = best_v[0];
    int bi = best_i[0];
    for (int w = 1; w < kThreads / kWarpSize; ++w) {
      if (gpu::arg_better(best_v[w], best_i[w], bv, bi)) bv = best_v[w], bi = best_i[w];
    }
    ids[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;  // all NaN: token 0
  }
}

__global__ void greedy_verify_kernel(const int32_t* row_tokens, const int32_t* target, const int32_t* seq_row_begin,
                                     int64_t num_seqs, int32_t* num_emitted) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= num_seqs) return;
  const int32_t b = seq_row_begin[s], e = seq_row_begin[s + 1];
  int32_t n = 1;
  while (b + n < e && target[b + n - 1] == row_tokens[b + n]) ++n;
  num_emitted[s] = e > b ? n : 0;
}

}  // namespace

gpuError_t argmax_gpu(const float* logits, int64_t logits_stride, int64_t num_rows, int64_t vocab, int32_t* ids,
                      gpuStream_t stream) {
  if (vocab <= 0 || vocab > 0x7ffffffe || num_rows < 0 || logits_stride < vocab) return gpuErrorInvalidValue;
  if (num_rows == 0) return gpuSuccess;
  argmax_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(logits, logits_stride, vocab, ids);
  return gpuGetLastError();
}

gpuError_t greedy_verify_gpu(const int32_t* row_tokens, const int32_t* target, const int32_t* seq_row_begin,
                             int64_t num_seqs, int32_t* num_emitted, gpuStream_t stream) {
  if (num_seqs < 0) return gpuErrorInvalidValue;
  if (num_seqs == 0) return gpuSuccess;
  const unsigned blocks = static_cast<unsigned>((num_seqs + 127) / 128);
  greedy_verify_kernel<<<blocks, 128, 0, stream>>>(row_tokens, target, seq_row_begin, num_seqs, num_emitted);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
