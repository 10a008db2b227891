// CPU embedding lookup (embedding.h): one dequantize_row per token.
#include "kernels/embedding/embedding.h"

#include <cassert>

#include "kernels/quant.h"

namespace deltaserve::kernels {

void embedding_lookup_ref(const void* table, DType type, int64_t num_embd, const int32_t* tokens,
                          int64_t num_tokens, float* out) {
  const size_t row_bytes = dtype_row_bytes(type, num_embd);
  const uint8_t* rows = static_cast<const uint8_t*>(table);
  for (int64_t t = 0; t < num_tokens; ++t) {
    assert(tokens[t] >= 0);
    dequantize_row(type, rows + static_cast<size_t>(tokens[t]) * row_bytes, out + t * num_embd,
                   num_embd);
  }
}

}  // namespace deltaserve::kernels
