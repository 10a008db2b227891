#include "kernels/dtype.h"

#include <stdexcept>

namespace deltaserve::kernels {

std::optional<DType> dtype_from_ggml_id(uint32_t id) {
  switch (id) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 8: return DType::Q8_0;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

const DTypeTraits& dtype_traits(DType type) {
  // Block layouts as in ggml-common.h: Q4_0 = f16 d + 16 nibble bytes; Q8_0 = f16 d + 32 int8;
  // K-quants are 256-element super-blocks (Q4_K 144 B, Q5_K 176 B, Q6_K 210 B).
  static const DTypeTraits f32{"F32", 1, 4}, f16{"F16", 1, 2}, bf16{"BF16", 1, 2},
      q4_0{"Q4_0", 32, 18}, q8_0{"Q8_0", 32, 34}, q4_k{"Q4_K", 256, 144},
      q5_k{"Q5_K", 256, 176}, q6_k{"Q6_K", 256, 210};
  switch (type) {
    case DType::F32: return f32;
    case DType::F16: return f16;
    case DType::BF16: return bf16;
    case DType::Q4_0: return q4_0;
    case DType::Q8_0: return q8_0;
    case DType::Q4_K: return q4_k;
    case DType::Q5_K: return q5_k;
    case DType::Q6_K: return q6_k;
  }
  throw std::logic_error("dtype_traits: unknown DType");
}

}  // namespace deltaserve::kernels
