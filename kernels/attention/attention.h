// Gated attention over a paged KV cache (MODEL.md 2.3 steps 7-9) for the rows of one
// sequence: row r attends causally to positions [0, positions[r]] of the cache, query head
// h reads KV head h / (num_heads / num_kv_heads), softmax in fp32, and the output is
// multiplied elementwise by sigmoid(gate). Rows and heads are independent.
#pragma once

#include <cstdint>

#include "kernels/parallel.h"

namespace deltaserve::kernels {

struct PagedAttentionArgs {
  const float* q;          // [num_rows][q_stride], head h at h * q_head_stride
  const float* gate;       // like q (gate of head h at gate + r*q_stride + h*q_head_stride)
  int64_t q_stride;
  int64_t q_head_stride;
  float* out;              // [num_rows][out_stride], head h at h * head_dim
  int64_t out_stride;
  const float* k_cache;    // [num_blocks][block_tokens][num_kv_heads][head_dim]
  const float* v_cache;    // same layout
  const int32_t* block_table;  // block of position p = block_table[p / block_tokens]
  int64_t block_tokens;
  const int32_t* positions;    // [num_rows]
  int64_t num_rows;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  float scale;             // 1 / sqrt(head_dim)
};
void paged_attention_ref(const PagedAttentionArgs& args, const ParallelFor& pf);

}  // namespace deltaserve::kernels
