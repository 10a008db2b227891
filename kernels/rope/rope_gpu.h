// GPU partial NeoX rotary embedding, in place (rope.h's contract over device pointers:
// x, positions on the device). The frequency of pair i is 1 / base^(2i/R) rounded to f32 as
// the CPU computes it (pow evaluated in double then rounded), so angles agree with
// rope_neox_ref up to the sin/cos implementations.
//
// Calling thread: any; enqueues on `stream`. gpuErrorInvalidValue for odd or non-positive
// rope_dims.
#pragma once

#include "kernels/gpu/gpu_compat.h"
#include "kernels/rope/rope.h"

namespace deltaserve::kernels {

gpuError_t rope_neox_gpu(const RopeArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
