// GPU row norms (norm.h's contracts over device pointers): RMSNorm (rows of n, weight
// already 1 + w as GGUF stores it) and the GDN gated RMSNorm (groups of n = dv). One block per
// row/group; the sum of squares is reduced in f32 in a fixed order (per-thread strided
// partials, warp butterflies, warps in order), so a row's result is batch-invariant. The CPU
// reference sums in double: agreement is to f32 rounding, not bitwise. y may alias x.
//
// Calling thread: any; enqueues on `stream`, no allocation. Returns the launch status, or
// gpuErrorInvalidValue for n <= 0.
#pragma once

#include "kernels/gpu/gpu_compat.h"
#include "kernels/norm/norm.h"

namespace deltaserve::kernels {

gpuError_t rms_norm_gpu(const RmsNormArgs& args, gpuStream_t stream);
gpuError_t gated_rms_norm_gpu(const GatedRmsNormArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
