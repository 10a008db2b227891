// Expert-grouped tiled matmul for MoE prefill: the many-pairs form of matmul_experts_gpu.
// A prompt chunk of n rows routed to k experts each gives n * k (row, rank) pairs; this kernel
// groups the pairs by expert and runs matmul_prefill_gpu's tile code (matmul_tile.h) on tiles
// of 16 (TF32) or 32 (f32) pairs x 64 outputs over each expert's pairs, so an expert's
// weights are read once per tile of pairs routed to it instead of once per pair
// (matmul_experts_gpu is a matvec per pair).
//
// Same inputs as matmul_experts_gpu (matmul_gpu.h): for each pair p < num_pairs,
// y row p (+)= W_{expert_ids[p]} x row (p / pairs_per_x_row); args.base.w is the stacked
// tensor (expert e's num_out rows at w + e * num_out * w_row_bytes), base.num_rows is ignored.
// Gated form (w_up set, W_up of W's shape, type, row bytes and expert stride; no accumulate):
// y[p][o] = SiLU(dot(W row o, x)) * dot(W_up row o, x), swiglu_gpu's expression on this
// kernel's own two sums: bit-identical to running it on W and W_up separately, then swiglu_gpu.
//
// Steps (all on `stream`, no host synchronisation, no allocation; two launches, one with
// plan_ready): (1) one block per expert counts the pairs routed below it and to it and
// scatters its pairs, stably (in increasing pair index), into the workspace's sorted list at
// its offset; (2) the tiled matmul over (pair tile slot) x (64-output block): a slot finds its
// expert by a binary search over the offsets; a block gathers its pairs' x rows, decodes the
// expert's weight tile into shared memory once, and writes y row p for each pair p. Slots
// past the last tile exit.
//
// Batch invariance: every y[p][o] is one f32 fused multiply-add chain over k, k ascending,
// on x row p / pairs_per_x_row and expert_ids[p]'s row o only, whatever the other pairs of the
// call, the tile the pair lands in or its position there: a pair alone is bit-identical to the
// same pair in any call. Each pair is also bit-identical to matmul_prefill_gpu on its expert's
// matrix and its x row (the same tile code), and NOT to matmul_experts_gpu (a different
// summation order), so a backend that needs a token's bits to match across chunk sizes uses
// one form for all of them. math = kTf32 (CUDA sm_80+; HIP: kF32): the tile's products on TF32
// tensor cores as matmul_prefill_gpu's kTf32, with the same invariance and the same
// per-pair equality with matmul_prefill_gpu(kTf32); NMSE ~1e-7 against the reference.
//
// Preconditions (else gpuErrorInvalidValue, nothing launched): matmul_prefill_gpu's (num_in a
// multiple of 8 and of the block size; x 16-byte aligned, x_stride % 4 == 0; F32/F16/BF16
// weight rows 16-byte aligned, quantised rows 2-byte aligned; w_up likewise), expert_ids and
// workspace non-null, workspace 4-byte aligned, 1 <= num_experts, 0 <= num_pairs < 2^31,
// pairs_per_x_row >= 1, a gated call does not accumulate. Weight types: F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K. An id outside [0, num_experts) is not an error the device can report: its
// pair is skipped (y row p is left as it was). Calling thread: any; enqueues and returns.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"

namespace deltaserve::kernels {

struct MatmulExpertsPrefillArgs {
  MatmulExpertsArgs experts;   // stacked W, x, y, strides, accumulate; expert_ids [num_pairs]
  int64_t num_experts;         // experts in the stack (ids are checked against it)
  const void* w_up = nullptr;  // gated form when set (stacked like W)
  void* workspace = nullptr;   // device, matmul_experts_prefill_workspace_bytes(); owned by the
                               // caller, not read across calls (any contents on entry)
  MatmulMath math = MatmulMath::kF32;  // kTf32: TF32 tensor cores, as matmul_prefill_gpu
  // The workspace already holds the plan of these expert_ids (same num_pairs, num_experts),
  // written by an earlier call on this stream with the same workspace (e.g. the gate/up call
  // before the down call of one MoE layer): the plan launch is skipped (one launch, not two).
  bool plan_ready = false;
};

// Workspace of one call: the per-expert offsets and the expert-sorted pair list.
size_t matmul_experts_prefill_workspace_bytes(int64_t num_pairs, int64_t num_experts);

gpuError_t matmul_experts_prefill_gpu(const MatmulExpertsPrefillArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
