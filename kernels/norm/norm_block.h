// Internal to the GPU kernels (included by .cu files only): one block normalises one row /
// group, the device half of norm_gpu.h. Shared by norm.cu (rms_norm_gpu, gated_rms_norm_gpu)
// and gdn.cu (gdn_step_gpu's fused gated-norm epilogue), so both run the same f32 operations in
// the same order and agree bitwise.
//
// Reduction order: thread t sums x[t], x[t + blockDim], ... (fmaf from 0), then gpu::block_sum
// (warp butterflies, warp totals added in warp order from 0). Threads without elements add
// zeros, and warps past the row's last element add exact zeros at the end, so for n <=
// blockDim the result depends only on n and the warp width, not on blockDim: a 128-thread
// block reproduces norm_threads_for(n) threads bit for bit whenever n <= 128.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels::detail {

inline constexpr int kNormMaxThreads = 256;

// Threads per norm block: the row width rounded up to 64, at most kNormMaxThreads. A fixed
// function of n, so the reduction order never depends on the batch.
__host__ __device__ constexpr unsigned norm_threads_for(int64_t n) {
  const int64_t t = ((n + 63) / 64) * 64;
  return static_cast<unsigned>(t < kNormMaxThreads ? t : kNormMaxThreads);
}

// Elements a thread of the one-row norms loads before it uses the first (kNormBatch loads in
// flight, one L2 round trip per batch instead of one per element: rolled, the 27B's
// 5,120-wide norm waited on 20 round trips a row).
inline constexpr int kNormBatch = 8;

// 1 / sqrt(mean(x^2) + eps) over x[0, n); every thread of the block calls it and gets the
// same bits: thread t sums x[t], x[t + T], ... (fmaf from 0, T = blockDim.x), then
// gpu::block_sum. scratch: gpu::kMaxWarpsPerBlock floats of shared memory.
__device__ __forceinline__ float block_inverse_rms(const float* x, int64_t n, float eps, float* scratch) {
  const int64_t stride = blockDim.x;
  float sum = 0.0f;
  for (int64_t base = threadIdx.x; base < n; base += kNormBatch * stride) {
    float v[kNormBatch];
#pragma unroll
    for (int k = 0; k < kNormBatch; ++k) v[k] = base + k * stride < n ? x[base + k * stride] : 0.0f;
#pragma unroll
    for (int k = 0; k < kNormBatch; ++k) {
      if (base + k * stride < n) sum = fmaf(v[k], v[k], sum);
    }
  }
  sum = gpu::block_sum(sum, scratch);
  return 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
}

// block_inverse_rms for R rows at once (rows[r], each n floats), one barrier instead of two per
// row: thread t sums row r's x[t + k T] by fmaf, k ascending, then each row's warp butterflies
// and warp totals added in warp order from 0, so each scale is block_inverse_rms's bits for a
// block of T = blockDim.x = 32 * kWarps threads (rms_norm_gpu's, when T = norm_threads_for(n);
// a 32-lane warp: the CUDA targets that call it).
// A thread has 8 loads a row in flight (for the staged matvec's carried norm, 8 measured at
// least as fast as 4 and faster than 32 / R; bench/RESULTS.md). Every thread of the block calls it.
template <int R, int kWarps>
__device__ __forceinline__ void block_inverse_rms_rows(const float* const (&rows)[R], int64_t n, float eps, float (&scale)[R]) {
  constexpr int kBatch = 8;
  constexpr int kStride = 32 * kWarps;  // == blockDim.x
  __shared__ float totals[R][kWarps];
  float sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) sum[r] = 0.0f;
  for (int64_t base = threadIdx.x; base < n; base += kBatch * kStride) {
    float v[R][kBatch];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) v[r][k] = base + k * kStride < n ? rows[r][base + k * kStride] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (base + k * kStride < n) sum[r] = fmaf(v[r][k], v[r][k], sum[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float s = gpu::warp_sum(sum[r]);
    if (gpu::lane_id() == 0) totals[r][gpu::warp_id()] = s;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += totals[r][w];
    scale[r] = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
  }
}

// One normed element as every rms_norm path rounds it: (x * scale) rounded, then * w rounded.
__device__ __forceinline__ float rms_normed(float x, float scale, float w) { return __fmul_rn(__fmul_rn(x, scale), w); }

// y[i] = f(i, x[i]) for the thread's elements i = t, t + T, ... of [0, n), kNormBatch loads of
// x (and of what f reads) in flight. y may alias x: a thread writes only elements it read.
template <class F>
__device__ __forceinline__ void block_norm_write(const float* x, float* y, int64_t n, F f) {
  const int64_t stride = blockDim.x;
  for (int64_t base = threadIdx.x; base < n; base += kNormBatch * stride) {
    float v[kNormBatch];
#pragma unroll
    for (int k = 0; k < kNormBatch; ++k) v[k] = base + k * stride < n ? f(base + k * stride, x[base + k * stride]) : 0.0f;
#pragma unroll
    for (int k = 0; k < kNormBatch; ++k) {
      if (base + k * stride < n) y[base + k * stride] = v[k];
    }
  }
}

// y = x / rms(x) * w * SiLU(z) over one group of n. y may alias x: each thread overwrites only
// the elements it alone read.
__device__ __forceinline__ void block_gated_rms_norm(const float* x, const float* z, const float* w, float* y, int64_t n,
                                                     float eps, float* scratch) {
  const float scale = block_inverse_rms(x, n, eps, scratch);
  block_norm_write(x, y, n, [&](int64_t i, float v) { return __fmul_rn(__fmul_rn(v, scale), w[i]) * gpu::siluf_(z[i]); });
}

// A float another block of this launch wrote (after its __threadfence and our counter
// handshake): read from L2, not from this multiprocessor's L1, which may hold a stale line.
__device__ __forceinline__ float load_from_other_block(const float* p) {
#if defined(DS_GPU_HIP)
  return *static_cast<const volatile float*>(p);
#else
  return __ldcg(p);
#endif
}

// rms_norm_gpu's bits for one row of n floats (y = x / rms(x) * w), computed by a block of
// any multiple of the warp width: rms_norm_gpu runs T = norm_threads_for(n) threads, thread t
// summing x[t], x[t + T], ... (fmaf from 0), then warp butterflies and the warp totals added
// in warp order from 0 (gpu::block_sum). Here warp w plays T's virtual warps w, w + W', ...
// (W' = this block's warps) and the totals are added in the same order. x may have been
// written by other blocks of this launch (read through load_from_other_block); y must not
// alias x. scratch: kNormMaxThreads / warp width floats of shared memory. Every thread of the
// block must call it.
// The loops are unrolled and the pointers restrict-qualified so a thread's loads go out
// together (one round trip to L2 per pass, not one per element, as the rolled form waited).
__device__ __forceinline__ void block_rms_norm_as_norm_gpu(const float* __restrict__ x, const float* __restrict__ w,
                                                          float* __restrict__ y, int64_t n, float eps, float* scratch) {
  const int virtual_threads = static_cast<int>(norm_threads_for(n));
  const int virtual_warps = virtual_threads / gpu::kWarpSize;
  const int block_warps = static_cast<int>(blockDim.x) / gpu::kWarpSize;
  for (int vw = gpu::warp_id(); vw < virtual_warps; vw += block_warps) {
    float sum = 0.0f;
#pragma unroll 8
    for (int64_t i = vw * gpu::kWarpSize + gpu::lane_id(); i < n; i += virtual_threads) {
      const float v = load_from_other_block(x + i);
      sum = fmaf(v, v, sum);
    }
    sum = gpu::warp_sum(sum);
    if (gpu::lane_id() == 0) scratch[vw] = sum;
  }
  __syncthreads();
  float total = 0.0f;
  for (int vw = 0; vw < virtual_warps; ++vw) total += scratch[vw];
  __syncthreads();
  const float scale = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = __fmul_rn(load_from_other_block(x + i), scale) * w[i];
}

// Elements per thread and row block_rms_norm_rows_as_norm_gpu keeps in registers.
inline constexpr int kNormRowsCached = 8;
__host__ __device__ constexpr bool norm_rows_cacheable(int64_t n) {
  return n > 0 && n <= kNormRowsCached * static_cast<int64_t>(norm_threads_for(n));
}

// rms_norm_gpu's bits for rows [0, num_rows) (num_rows <= R) whose elements the block's
// threads already hold: thread t < T = norm_threads_for(n) holds v[r][k] = element t + k * T of
// row r (any value past n; threads t >= T hold nothing used), as rms_norm_gpu's thread t sums
// them (fmaf order, warp totals). Writes y[r * y_stride + i] = x_i / rms * w_i. Requires
// blockDim.x >= T and norm_rows_cacheable(n). scratch: R * kNormMaxThreads / warp width floats
// of shared memory. Every thread of the block must call it (one barrier inside).
template <int R>
__device__ __forceinline__ void block_rms_norm_held_rows(const float (&v)[R][kNormRowsCached], int num_rows,
                                                         const float* __restrict__ w, float* __restrict__ y,
                                                         int64_t y_stride, int64_t n, float eps, float* scratch) {
  constexpr int kWarpsMax = kNormMaxThreads / gpu::kWarpSize;
  const int T = static_cast<int>(norm_threads_for(n));
  const int t = static_cast<int>(threadIdx.x);
  const int vwarps = T / gpu::kWarpSize;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kNormRowsCached; ++k) {
      if (t + static_cast<int64_t>(k) * T < n) sum = fmaf(v[r][k], v[r][k], sum);
    }
    sum = gpu::warp_sum(sum);
    if (gpu::lane_id() == 0 && gpu::warp_id() < vwarps) scratch[r * kWarpsMax + gpu::warp_id()] = sum;
  }
  __syncthreads();
  if (t >= T) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < num_rows) {
      float total = 0.0f;
      for (int vw = 0; vw < vwarps; ++vw) total += scratch[r * kWarpsMax + vw];
      const float scale = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
#pragma unroll
      for (int k = 0; k < kNormRowsCached; ++k) {
        const int64_t i = t + static_cast<int64_t>(k) * T;
        if (i < n) y[r * y_stride + i] = __fmul_rn(v[r][k], scale) * w[i];
      }
    }
  }
}

// rms_norm_gpu's bits (as block_rms_norm_as_norm_gpu) for rows [0, num_rows) of x (num_rows
// <= R) into y, every row at once: a thread's loads of all rows go out together and its
// elements stay in registers for the scaling pass (block_rms_norm_held_rows), so the block
// waits on L2 once, not twice per row (the fused router's prologue, 4 rows one after another,
// was a serial tail of every MoE layer). Thread t < T = norm_threads_for(n) is rms_norm_gpu's
// thread t (the same elements, fmaf order and warp totals). Requires blockDim.x >= T and
// norm_rows_cacheable(n); x may have been written by other blocks of this launch; y must not
// alias x. scratch: R * kNormMaxThreads / warp width floats of shared memory. Every thread of
// the block must call it; y is complete after the caller's next barrier.
template <int R>
__device__ __forceinline__ void block_rms_norm_rows_as_norm_gpu(const float* __restrict__ x, int64_t x_stride, int num_rows,
                                                               const float* __restrict__ w, float* __restrict__ y,
                                                               int64_t y_stride, int64_t n, float eps, float* scratch) {
  const int T = static_cast<int>(norm_threads_for(n));
  const int t = static_cast<int>(threadIdx.x);
  const bool owner = t < T;
  float v[R][kNormRowsCached];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int k = 0; k < kNormRowsCached; ++k) {
      const int64_t i = t + static_cast<int64_t>(k) * T;
      v[r][k] = owner && r < num_rows && i < n ? load_from_other_block(x + r * x_stride + i) : 0.0f;
    }
  }
  block_rms_norm_held_rows<R>(v, num_rows, w, y, y_stride, n, eps, scratch);
}

}  // namespace deltaserve::kernels::detail
