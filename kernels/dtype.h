// Weight and activation element types, with ggml's numeric ids and exact block layouts
// (a GGUF file stores these ids, so they must never be renumbered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace deltaserve::kernels {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};

struct DTypeTraits {
  std::string_view name;
  int64_t block_elements;  // elements per block (1 for plain floats)
  size_t block_bytes;      // bytes per block
};

// nullopt for an id this project does not support (the GGUF reader turns that into an error).
std::optional<DType> dtype_from_ggml_id(uint32_t id);
const DTypeTraits& dtype_traits(DType type);
inline std::string_view dtype_name(DType type) { return dtype_traits(type).name; }

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers).
inline size_t dtype_row_bytes(DType type, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  return static_cast<size_t>(n / t.block_elements) * t.block_bytes;
}

}  // namespace deltaserve::kernels
