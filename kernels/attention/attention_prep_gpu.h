// The per-head preparation of gated attention (MODEL.md 2.3 steps 4-6) in ONE launch, over
// decode and prefill rows alike: q and K heads are RMSNorm1p-ed over head_dim (q_norm /
// k_norm, weights already 1 + w), their first rope_dims dims get partial NeoX RoPE at the
// row's position, q and K are written back in place, and K and V are appended to the paged
// cache at (row_seq[r], positions[r]).
//
// Bit-identical to the five launches it replaces (rms_norm_gpu q, rms_norm_gpu k,
// rope_neox_gpu q, rope_neox_gpu k, kv_append_gpu): each head is normed by one block of
// norm.cu's threads_for(head_dim) threads with norm.cu's reduction (per-thread strided fmaf
// partials, warp butterflies, warp totals in warp order) and scale expression, then rotated
// with rope.cu's exact frequency / angle / rotation expressions. On HIP, whose __fmul_rn /
// __fsub_rn are plain operators open to contraction, the same expressions over the same
// loaded values give the same code in practice, but only the CUDA build is checked bitwise.
//
// Work split: one block per (row, head slot); slots [0, num_heads) are q heads, slots
// [num_heads, num_heads + num_kv_heads) K heads, whose block also copies the same V head. A
// block reads and writes only its own row: batch-invariant.
//
// Shapes: q [num_rows][q_stride], q head h at h * q_head_stride (the gate interleaved after
// it is neither read nor written); k, v [num_rows][kv_stride], KV head j at j * head_dim;
// caches [num_blocks][block_tokens][num_kv_heads][head_dim].
// Preconditions (else gpuErrorInvalidValue, nothing launched): num_rows >= 0; num_heads >= 0,
// num_kv_heads > 0, num_heads + num_kv_heads <= 65535; 0 < head_dim <= 256; rope_dims even,
// 0 < rope_dims <= head_dim; block_tokens > 0; no null pointer. Rows must have distinct
// (sequence, position) pairs. num_rows == 0 launches nothing and returns gpuSuccess.
//
// Calling thread: any; enqueues on `stream`; no allocation.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

inline constexpr int64_t kAttentionPrepMaxHeadDim = 256;

struct AttentionPrepGpuArgs {
  float* q;                  // [num_rows][q_stride], normed + rotated in place
  int64_t q_stride;
  int64_t q_head_stride;
  float* k;                  // [num_rows][kv_stride], normed + rotated in place
  const float* v;            // [num_rows][kv_stride]
  int64_t kv_stride;
  const float* q_norm;       // [head_dim], 1 + w
  const float* k_norm;       // [head_dim], 1 + w
  float* k_cache;            // [num_blocks][block_tokens][num_kv_heads][head_dim]
  float* v_cache;
  const int32_t* block_tables;  // [num_seqs][block_table_stride]
  int64_t block_table_stride;
  const int32_t* row_seq;    // [num_rows]
  const int32_t* positions;  // [num_rows]
  int64_t block_tokens;
  int64_t num_rows;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t rope_dims;         // R: dims [0, R) rotated, NeoX pairs (i, i + R/2)
  float rope_base;
  float eps;
};

gpuError_t attention_prep_gpu(const AttentionPrepGpuArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
