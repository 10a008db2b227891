// GPU matmul of f32 activations against weights in their file format (matmul.h's contract,
// over device pointers): y[r][o] (+)= dot(W row o, x row r). Weight types: F32, F16, BF16,
// Q8_0, Q4_0, Q4_K, Q6_K (Q5_K: not yet, gpuErrorInvalidValue).
//
// Matrix-vector form for decode and verify steps: every output element is one warp's dot
// product over the whole row, in a fixed order (lane l takes 8-element chunks l, l + W, ...,
// fused multiply-adds in element order, then a butterfly over the warp). Activation rows go
// through in groups of up to 8 that share each weight load; a row's arithmetic does not
// depend on the group, so results are batch-invariant: row r alone is bit-identical to row r
// in any batch. Not bit-identical to matmul_ref (different order, fused multiply-add): the
// tests hold it to an NMSE bound.
//
// Calling thread: any; enqueues on `stream` and returns (no synchronisation, no allocation).
// Returns gpuErrorInvalidValue without launching when a precondition fails: num_in a multiple
// of 8 and of the block size; x 16-byte aligned with x_stride % 4 == 0; for F32/F16/BF16 the
// weight rows 16-byte aligned (w and w_row_bytes); quantised rows 2-byte aligned.
// Otherwise the launch status (gpuGetLastError).
#pragma once

#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/matmul.h"

namespace deltaserve::kernels {

gpuError_t matmul_gpu(const MatmulArgs& args, gpuStream_t stream);

// Expert-indexed matvec for MoE: for each pair p < num_pairs (a routed (row, rank), pairs in
// row-major [row][rank] order), y row p = W_{expert_ids[p]} x row (p / x_rows_per_pair)...
// i.e. x row p / pairs_per_x_row: gate/up projections pass pairs_per_x_row = k (each token
// row feeds its k experts), the down projection passes 1 (one input row per pair).
// args.w is the stacked tensor (expert 0); args.num_rows is ignored (num_pairs rows of y).
// Each pair's result is bit-identical to matmul_gpu on that expert's matrix and that x row.
struct MatmulExpertsArgs {
  MatmulArgs base;
  const int32_t* expert_ids;  // [num_pairs], device
  int64_t num_pairs;
  int64_t pairs_per_x_row;
};
gpuError_t matmul_experts_gpu(const MatmulExpertsArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
