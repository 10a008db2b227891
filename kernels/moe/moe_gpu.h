// MoE routing on the GPU (moe.h's moe_route_ref over device pointers): per row, softmax over
// all experts in f32, top-k (by probability, lower id first on ties), weights renormalised to
// sum 1, written straight to expert_ids / weights for matmul_experts_gpu. One block per
// row, fixed reduction order: batch-invariant. Ids agree with the CPU unless two
// probabilities are within f32 rounding of each other; weights to f32 rounding.
//
// Preconditions (else gpuErrorInvalidValue): 1 <= num_used <= min(num_experts, 32),
// num_experts <= 4096. Calling thread: any; enqueues on `stream`; no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/moe/moe.h"

namespace deltaserve::kernels {

gpuError_t moe_route_gpu(const MoeRouteArgs& args, gpuStream_t stream);

// The router and the routing in ONE launch (one fewer per MoE layer): per row r,
// logits[r][e] = dot(router row e, x row r) for every expert, shared_gate_logits[r] =
// dot(shared_gate_w, x row r) when shared_gate_w is set, then moe_route_gpu's routing of
// logits[r] into expert_ids / weights. The dot products are matmul_gpu's F32 matvec (one warp
// per output, same order): logits and shared gate logit are bit-identical to matmul_gpu /
// matmul_segments_gpu on the same weights, and so ids and weights to moe_route_gpu on them.
// Batch-invariant like both.
//
// The products are spread over blocks of 8 outputs x groups of up to 8 rows (the router
// matrix is read by many SMs at once, as by matmul_gpu); the block that finishes last for a
// row group (a counter per group in sync_counters) routes the group's rows and sets the
// counter back to zero, so the same counters serve every later launch and graph replay.
// Launches on one sync_counters array must not overlap (same stream, or ordered).
//
// Preconditions (else gpuErrorInvalidValue, nothing launched): moe_route_gpu's on
// num_experts / num_used; F32 weights: num_in a multiple of 8, router_w and shared_gate_w
// 16-byte aligned, w_row_bytes a multiple of 16 and >= 4 * num_in; x 16-byte aligned,
// x_stride >= num_in and a multiple of 4; shared_gate_w and shared_gate_logits both set or
// both null; num_rows <= 65535 * 8; every other pointer non-null.
struct MoeRouterArgs {
  const float* x;                // [num_rows][x_stride], device
  int64_t x_stride;              // floats
  int64_t num_rows;
  int64_t num_in;                // H
  const float* router_w;         // [num_experts] rows of num_in F32, w_row_bytes apart
  size_t w_row_bytes;
  const float* shared_gate_w;    // [num_in] F32 (ffn_gate_inp_shexp), or null
  int64_t num_experts;
  int64_t num_used;              // k
  float* logits;                 // [num_rows][num_experts] out (the routing reads it back)
  float* shared_gate_logits;     // [num_rows] out, or null with shared_gate_w
  int32_t* expert_ids;           // [num_rows][k] out, by descending weight (ties: lower id)
  float* weights;                // [num_rows][k] out, sum to 1 per row
  int32_t* sync_counters;        // [num_rows] at least, zero before the first launch; left zero
  const float* norm_w = nullptr;  // [num_in] input norm weight, or null (x already normed)
  float norm_eps = 0.0f;
  float* norm_out = nullptr;      // [num_rows][norm_out_stride] out: the normed rows
  int64_t norm_out_stride = 0;
};
gpuError_t moe_router_gpu(const MoeRouterArgs& args, gpuStream_t stream);

// The decode pairs of a step grouped by expert for matmul_segments_gpu's expert-grouped
// segments (kernels/matmul/matmul_gpu.h ExpertPairGroups): every pair p < num_pairs with a valid id
// lands in exactly one group of its expert expert_ids[p], at most rows_per_group pairs per
// group; group_pairs rows are filled from the front and padded with -1; *num_groups = the
// groups used, sum over experts of ceil(pairs / rows_per_group) <= moe_pair_groups_bound().
// Which group and slot a pair gets may vary between launches; the products do not (a row's
// bits do not depend on its group). One block; workspace-free (shared memory).
//
// Preconditions (else gpuErrorInvalidValue): rows_per_group 2 or 4; num_experts in [1,
// 4096]; num_pairs >= 0; pointers non-null. Ids outside [0, num_experts) are skipped.
struct MoeGroupPairsArgs {
  const int32_t* expert_ids;  // [num_pairs], device
  int64_t num_pairs;
  int64_t num_experts;
  int rows_per_group;
  int32_t* group_expert;      // [moe_pair_groups_bound] out
  int32_t* group_pairs;       // [moe_pair_groups_bound][rows_per_group] out
  int32_t* num_groups;        // [1] out
};
gpuError_t moe_group_pairs_gpu(const MoeGroupPairsArgs& args, gpuStream_t stream);
int64_t moe_pair_groups_bound(int64_t num_pairs, int64_t num_experts, int rows_per_group);

// Whether moe_router_gpu can take the input norm for num_rows rows of num_in (its row group's
// normed rows and the probabilities fit the default 48 KiB of shared memory per block).
bool moe_router_fuses_norm(int64_t num_in, int64_t num_rows, int64_t num_experts);

}  // namespace deltaserve::kernels
