// The MoE layer's down products and weighted combine in ONE launch for decode rows under the
// staged matvec (MatvecMath::kStaged): per token row r,
//   y[r] (+)= sum over rank < k, in rank order, of weights[r][rank] * (W_down[ids[r][rank]] g[r k + rank])
//             + sigmoid(shared_gate_logit[r]) * (W_shared_down shared_g[r])
// with the next layer's input RMSNorm of the final y rows as an optional epilogue. The same
// bits as the two launches it replaces: matmul_segments_gpu of the expert pairs' segment and the
// shared down segment (staged, matmul_mma_staged.cu's arithmetic through matvec_staged.h),
// then moe_combine_gpu (its rounding: products and sums one by one, rank order, shared term
// last, then the residual; its norm epilogue emulating rms_norm_gpu).
//
// Why: at one decode row the 35B-A3B's two launches (the down products, ~5 MB of weights in
// 1,152 blocks of two chunks each, then the combine reading the nine outputs back) took many
// times what the bytes take. Here a block
// owns 16 outputs of one token row and walks every chunk of that row's sources (the shared
// expert's, then each routed expert's) through cp.async rings, keeps each source's warp sums
// in shared memory and combines them itself; the expert outputs never go to memory. The
// 35B-A3B's steps are faster with it at 1-16 rows (bench/RESULTS.md).
//
// Shapes (moe_down_combine_supported): Q4_0 matrices whose rows are multiples of 256 inputs,
// both of 1,024-multiples or neither (the staged launch's rule: one K walk for the launch),
// 16-byte aligned rows, expert slices and activations; up to 32 ranks; the launch's shared
// memory within the device's limit. Calling thread: any; enqueues on `stream`; no allocation
// (the first launch on a device sets the kernel's shared-memory limit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/moe/moe.h"  // MoeDownCombineArgs, moe_down_combine_ref

namespace deltaserve::kernels {

// Whether the fused launch takes these shapes on this build (CUDA with bf16 mma; the device's
// capability is matvec_math_on_device's to judge) with the same bits as the two launches.
bool moe_down_combine_supported(const MoeDownCombineArgs& args);

// gpuErrorInvalidValue (nothing launched) where not supported or on bad sizes.
gpuError_t moe_down_combine_gpu(const MoeDownCombineArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
