// attention_prep_gpu (attention_prep_gpu.h): q/K RMSNorm + partial NeoX RoPE + KV append in
// one launch. The arithmetic below is a copy of norm.cu's rms_norm_kernel and rope.cu's
// rope_neox_kernel, expression for expression (the bitwise contract depends on it: change
// them together; tests/gpu/attention_prep_test.cu compares against the five launches).
#include <cstdint>

#include "kernels/attention/attention_prep_gpu.h"
#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxHeadDim = static_cast<int>(kAttentionPrepMaxHeadDim);

// norm.cu's inverse_rms: blockDim.x must be norm.cu's threads_for(n) for the same partials.
__device__ float inverse_rms(const float* x, int64_t n, float eps, float* scratch) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum = fmaf(x[i], x[i], sum);
  sum = gpu::block_sum(sum, scratch);
  return 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
}

// Rotates pairs (i, i + R/2), i < R/2, of one head held in shared memory (rope.cu's body).
__device__ void rope_head(float* head, float pos, int64_t rope_dims, float base) {
  const int64_t half = rope_dims / 2;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dims);
    const float power = static_cast<float>(pow(static_cast<double>(base), static_cast<double>(exponent)));
    const float angle = pos * (1.0f / power);
    float s, c;
    sincosf(angle, &s, &c);
    const float x0 = head[i], x1 = head[i + half];
    head[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    head[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
}

// grid (row, head slot); blockDim.x = threads_for(head_dim).
__global__ void __launch_bounds__(kMaxThreads) attention_prep_kernel(const AttentionPrepGpuArgs a) {
  gpu::begin_kernel();
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  __shared__ float head[kMaxHeadDim];
  const int64_t r = blockIdx.x, slot = blockIdx.y, n = a.head_dim;
  const bool is_q = slot < a.num_heads;
  const int64_t kv_head = slot - a.num_heads;
  float* x = is_q ? a.q + r * a.q_stride + slot * a.q_head_stride : a.k + r * a.kv_stride + kv_head * n;
  const float* w = is_q ? a.q_norm : a.k_norm;

  // q_norm / k_norm (norm.cu: y = (x * scale) * w, each product rounded).
  const float scale = inverse_rms(x, n, a.eps, scratch);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) head[i] = __fmul_rn(x[i], scale) * w[i];
  __syncthreads();
  rope_head(head, static_cast<float>(a.positions[r]), a.rope_dims, a.rope_base);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = head[i];
  if (is_q) return;

  // kv_append (attention.cu): this K head and the same V head at the row's cache slot.
  const int64_t p = a.positions[r];
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.block_table_stride;
  const int64_t at = ((static_cast<int64_t>(table[p / a.block_tokens]) * a.block_tokens + p % a.block_tokens) *
                          a.num_kv_heads + kv_head) * n;
  const float* v = a.v + r * a.kv_stride + kv_head * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    a.k_cache[at + i] = head[i];
    a.v_cache[at + i] = v[i];
  }
}

// norm.cu's threads_for: the head width rounded up to a multiple of 64, at most 256.
unsigned threads_for(int64_t n) {
  const int64_t t = ((n + 63) / 64) * 64;
  return static_cast<unsigned>(t < kMaxThreads ? t : kMaxThreads);
}

bool valid(const AttentionPrepGpuArgs& a) {
  if (a.num_rows < 0 || a.num_heads < 0 || a.num_kv_heads <= 0 || a.num_heads + a.num_kv_heads > 65535) return false;
  if (a.head_dim <= 0 || a.head_dim > kAttentionPrepMaxHeadDim) return false;
  if (a.rope_dims <= 0 || a.rope_dims % 2 != 0 || a.rope_dims > a.head_dim || a.block_tokens <= 0) return false;
  return a.q != nullptr && a.k != nullptr && a.v != nullptr && a.q_norm != nullptr && a.k_norm != nullptr &&
         a.k_cache != nullptr && a.v_cache != nullptr && a.block_tables != nullptr && a.row_seq != nullptr &&
         a.positions != nullptr;
}

}  // namespace

gpuError_t attention_prep_gpu(const AttentionPrepGpuArgs& a, gpuStream_t stream) {
  if (!valid(a)) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  const dim3 grid(static_cast<unsigned>(a.num_rows), static_cast<unsigned>(a.num_heads + a.num_kv_heads));
  gpu::launch(attention_prep_kernel, grid, threads_for(a.head_dim), 0, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
