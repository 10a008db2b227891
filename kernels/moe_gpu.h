// MoE routing on the GPU (moe.h's moe_route_ref over device pointers): per row, softmax over
// all experts in f32, top-k (by probability, lower id first on ties), weights renormalised to
// sum 1, written straight to expert_ids / weights for matmul_experts_gpu. One block per
// row, fixed reduction order: batch-invariant. Ids agree with the CPU unless two
// probabilities are within f32 rounding of each other; weights to f32 rounding.
//
// The router logits come from matmul_gpu on the (F32) router weights: all SMs stream the
// router matrix there, where one block per row here would read it on one SM.
//
// Preconditions (else gpuErrorInvalidValue): 1 <= num_used <= min(num_experts, 32),
// num_experts <= 4096. Calling thread: any; enqueues on `stream`; no allocation.
#pragma once

#include "kernels/gpu_compat.h"
#include "kernels/moe.h"

namespace deltaserve::kernels {

gpuError_t moe_route_gpu(const MoeRouteArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
