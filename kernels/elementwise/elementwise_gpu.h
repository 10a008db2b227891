// GPU elementwise ops over device pointers: SwiGLU (moe.h's swiglu_ref) and the residual add.
// Each element is computed alone (batch-invariant, bit-identical whatever n); y may alias
// an input. Calling thread: any; enqueues on `stream`; returns the launch status.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

// y[i] = SiLU(gate[i]) * up[i].
gpuError_t swiglu_gpu(const float* gate, const float* up, float* y, int64_t n, gpuStream_t stream);

// y[i] = a[i] + b[i] (residual connections).
gpuError_t add_gpu(const float* a, const float* b, float* y, int64_t n, gpuStream_t stream);

}  // namespace deltaserve::kernels
