// Token embedding lookup: out row t = the decoded table row tokens[t] (f32).
// Table layout (ggml ne = {num_embd, num_vocab}): row v at table + v * dtype_row_bytes(type,
// num_embd). Rows are decoded with dequantize_row, so values are bit-identical to it.
//
// Calling thread: any; does not block. Preconditions (assert): num_embd is a multiple of
// the block size; every token is in [0, num_vocab) (the caller validated it: this function
// cannot, it does not know num_vocab); out holds num_tokens * num_embd floats.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace deltaserve::kernels {

void embedding_lookup_ref(const void* table, DType type, int64_t num_embd, const int32_t* tokens,
                          int64_t num_tokens, float* out);

}  // namespace deltaserve::kernels
