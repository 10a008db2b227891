// Small per-step GPU ops of the GPU backend (runtime/gpu) that no other kernel covers: the row
// gather of the LM head and the MoE combine. Their CPU counterparts are the row copies of
// CpuBackend::lm_head and the weighted sum of runtime/cpu/cpu_ffn_layer.cpp's moe_forward.
// Every output element is computed alone, in a fixed order: batch-invariant.
//
// Calling thread: any; enqueues on `stream`; no allocation. gpuErrorInvalidValue on negative
// sizes or an incomplete norm epilogue, else the launch status.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

// dst row i = src row rows[i] (width floats) for i < num_rows; rows must be valid indices.
gpuError_t gather_rows_gpu(const float* src, int64_t src_stride, const int32_t* rows, int64_t num_rows,
                           int64_t width, float* dst, int64_t dst_stride, gpuStream_t stream);

// y[r][i] = sum over rank < num_used, in rank order, of weights[r][rank] * expert_out[r *
// num_used + rank][i], then + sigmoid(shared_gate_logit[r]) * shared[r][i] (when shared is
// non-null). Products and sums are rounded one by one (no fused multiply-add), as the CPU does.
// accumulate: y[r][i] += that sum instead (the residual add fused: bit-identical to
// add_gpu(y, combine) after a plain combine).
// Norm epilogue (norm_w set): also norm_out[r][i] = RMSNorm(y row r)[i] * norm_w[i] of the
// final y rows (after the accumulate), bit-identical to rms_norm_gpu over y with norm_w and
// norm_eps (the next layer's input norm fused in: one launch instead of two). A row of up to
// 2,048 elements (8 per thread of rms_norm_gpu's block) with up to 8 ranks runs in one block;
// otherwise the combine runs on blocks of 256 elements of a row and the last block of a row to
// finish (norm_counters[row], which it resets to zero) normalises it. norm_out must not overlap y or the inputs;
// norm_out_stride >= n; n > 0; num_rows <= 65535; norm_counters non-null.
struct MoeCombineArgs {
  const float* expert_out;         // [num_rows * num_used][n]
  const float* weights;            // [num_rows][num_used]
  const float* shared;             // [num_rows][n] or null
  const float* shared_gate_logit;  // [num_rows]
  float* y;                        // [num_rows][n]
  int64_t num_rows;
  int64_t num_used;
  int64_t n;
  bool accumulate = false;
  const float* norm_w = nullptr;   // [n] RMSNorm weight (1 + w as GGUF stores it), or null
  float norm_eps = 0.0f;
  float* norm_out = nullptr;       // [num_rows][norm_out_stride]; set iff norm_w is
  int64_t norm_out_stride = 0;
  unsigned* norm_counters = nullptr;  // [num_rows], zero between launches; required with norm_w
};
gpuError_t moe_combine_gpu(const MoeCombineArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
