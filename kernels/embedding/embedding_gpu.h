// GPU token embedding lookup (embedding.h's contract over device pointers): out row t =
// the decoded table row tokens[t], bit-identical to embedding_lookup_ref. Types: F32, F16,
// BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K. Tokens must be valid (the caller checked them on the host).
//
// Calling thread: any; enqueues on `stream`. gpuErrorInvalidValue when num_embd is not a
// multiple of 8 and of the block size, for an unsupported type, or a misaligned table.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

gpuError_t embedding_lookup_gpu(const void* table, DType type, int64_t num_embd, const int32_t* tokens,
                                int64_t num_tokens, float* out, gpuStream_t stream);

}  // namespace deltaserve::kernels
