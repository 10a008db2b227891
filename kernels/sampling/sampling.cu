// Greedy argmax and draft verification (sampling_gpu.h).
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/sampling/sampling_gpu.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 1024;      // argmax_gpu without workspace: one block per row
constexpr int kSplitThreads = 256;  // argmax_gpu with workspace: kSegment elements a block
constexpr int kUnroll = 8;          // float4 loads in flight per thread
constexpr int64_t kSegment = int64_t{4} * kSplitThreads * kUnroll;  // 8192 elements

__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fffffff); }

// Thread-local best of row[begin, end) (begin a multiple of 4): float4 number tid + T * j
// holds elements begin + 4 (tid + T j) ..; kUnroll float4s in flight; elements past `end`
// read as NaN, which never wins. vec: row 16-byte aligned (else scalar loads).
template <int T>
__device__ __forceinline__ void scan_range(const float* row, int64_t begin, int64_t end, bool vec, float& v, int& i) {
  for (int64_t base = begin + 4 * static_cast<int64_t>(threadIdx.x); base < end; base += int64_t{4} * T * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t e = base + int64_t{4} * T * u;
      if (vec && e + 3 < end) {
        x[u] = *reinterpret_cast<const float4*>(row + e);
      } else {
        x[u].x = e < end ? row[e] : nan_f();
        x[u].y = e + 1 < end ? row[e + 1] : nan_f();
        x[u].z = e + 2 < end ? row[e + 2] : nan_f();
        x[u].w = e + 3 < end ? row[e + 3] : nan_f();
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int e = static_cast<int>(base + int64_t{4} * T * u);
      if (gpu::arg_better(x[u].x, e, v, i)) v = x[u].x, i = e;
      if (gpu::arg_better(x[u].y, e + 1, v, i)) v = x[u].y, i = e + 1;
      if (gpu::arg_better(x[u].z, e + 2, v, i)) v = x[u].z, i = e + 2;
      if (gpu::arg_better(x[u].w, e + 3, v, i)) v = x[u].w, i = e + 3;
    }
  }
}

// Block-wide (value, index) maximum; the result is valid in thread 0. The (value, index)
// order is total (NaN lowest), so the reduction order does not change the result.
__device__ __forceinline__ void block_argmax(float& v, int& i, float* best_v, int* best_i) {
  gpu::warp_argmax(v, i);
  if (gpu::lane_id() == 0) best_v[gpu::warp_id()] = v, best_i[gpu::warp_id()] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int num_warps = static_cast<int>(blockDim.x) / kWarpSize;
    for (int w = 1; w < num_warps; ++w) {
      if (gpu::arg_better(best_v[w], best_i[w], v, i)) v = best_v[w], i = best_i[w];
    }
  }
}

bool row_vec_ok(const float* logits, int64_t stride) {
  return (reinterpret_cast<uintptr_t>(logits) & 15u) == 0 && stride % 4 == 0;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t stride, int64_t vocab, bool vec,
                                                          int32_t* ids) {
  gpu::begin_kernel();
  __shared__ float best_v[gpu::kMaxWarpsPerBlock];
  __shared__ int best_i[gpu::kMaxWarpsPerBlock];
  float v = nan_f();
  int i = 0x7fffffff;
  scan_range<kThreads>(logits + blockIdx.x * stride, 0, vocab, vec, v, i);
  block_argmax(v, i, best_v, best_i);
  if (threadIdx.x == 0) ids[blockIdx.x] = i == 0x7fffffff ? 0 : i;  // all NaN: token 0
}

// Block (segment, row): the best of its kSegment elements goes to the workspace; the block
// that finishes last for its row (counter) reduces the row's segments and resets the counter.
__global__ void __launch_bounds__(kSplitThreads) argmax_split_kernel(const ArgmaxGpuArgs a, bool vec) {
  gpu::begin_kernel();
  __shared__ float best_v[kSplitThreads / 32];
  __shared__ int best_i[kSplitThreads / 32];
  __shared__ bool is_last;
  const int64_t seg = blockIdx.x, r = blockIdx.y, num_segs = gridDim.x;
  const int64_t cap = a.workspace_rows > 0 ? a.workspace_rows : a.num_rows;  // fixed layout
  uint32_t* counter = a.workspace + r;
  float* seg_v = reinterpret_cast<float*>(a.workspace + cap) + r * num_segs;
  int* seg_i = reinterpret_cast<int*>(a.workspace + cap + cap * num_segs) + r * num_segs;
  float v = nan_f();
  int i = 0x7fffffff;
  const int64_t begin = seg * kSegment;
  scan_range<kSplitThreads>(a.logits + r * a.logits_stride, begin, min(begin + kSegment, a.vocab), vec, v, i);
  block_argmax(v, i, best_v, best_i);
  if (threadIdx.x == 0) {
    seg_v[seg] = v;
    seg_i[seg] = i;
    gpu::fence_acq_rel_device();  // the partial is visible device-wide before the count says so
    is_last = atomicAdd(counter, 1u) == static_cast<uint32_t>(num_segs - 1);
  }
  __syncthreads();
  if (!is_last) return;
  gpu::fence_acq_rel_device();
  v = nan_f();
  i = 0x7fffffff;
  for (int64_t s = threadIdx.x; s < num_segs; s += kSplitThreads) {
    const float sv = static_cast<volatile float*>(seg_v)[s];
    const int si = static_cast<volatile int*>(seg_i)[s];
    if (gpu::arg_better(sv, si, v, i)) v = sv, i = si;
  }
  block_argmax(v, i, best_v, best_i);
  if (threadIdx.x == 0) {
    a.ids[r] = i == 0x7fffffff ? 0 : i;
    *counter = 0;  // ready for the next launch
  }
}

__global__ void greedy_verify_kernel(const int32_t* row_tokens, const int32_t* target, const int32_t* seq_row_begin,
                                     int64_t num_seqs, int32_t* num_emitted) {
  gpu::begin_kernel();
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
  gpu::launch(argmax_kernel, static_cast<unsigned>(num_rows), kThreads, 0, stream, logits, logits_stride, vocab,
                                                                         row_vec_ok(logits, logits_stride), ids);
  return gpuGetLastError();
}

int64_t argmax_workspace_words(int64_t num_rows, int64_t vocab) {
  const int64_t num_segs = (vocab + kSegment - 1) / kSegment;
  return num_rows * (1 + 2 * num_segs);
}

gpuError_t argmax_gpu(const ArgmaxGpuArgs& a, gpuStream_t stream) {
  if (a.vocab <= 0 || a.vocab > 0x7ffffffe || a.num_rows < 0 || a.num_rows > 65535 || a.logits_stride < a.vocab ||
      a.workspace == nullptr || a.workspace_rows < 0 || (a.workspace_rows > 0 && a.num_rows > a.workspace_rows)) {
    return gpuErrorInvalidValue;
  }
  if (a.num_rows == 0) return gpuSuccess;
  const dim3 grid(static_cast<unsigned>((a.vocab + kSegment - 1) / kSegment), static_cast<unsigned>(a.num_rows));
  gpu::launch(argmax_split_kernel, grid, kSplitThreads, 0, stream, a, row_vec_ok(a.logits, a.logits_stride));
  return gpuGetLastError();
}

gpuError_t greedy_verify_gpu(const int32_t* row_tokens, const int32_t* target, const int32_t* seq_row_begin,
                             int64_t num_seqs, int32_t* num_emitted, gpuStream_t stream) {
  if (num_seqs < 0) return gpuErrorInvalidValue;
  if (num_seqs == 0) return gpuSuccess;
  const unsigned blocks = static_cast<unsigned>((num_seqs + 127) / 128);
  gpu::launch(greedy_verify_kernel, blocks, 128, 0, stream, row_tokens, target, seq_row_begin, num_seqs, num_emitted);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
