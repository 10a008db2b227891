// A read-only view of one weight tensor, in ggml's dimension order (ne[0] innermost).
// The bytes live in a memory map or in a buffer owned by the LoadedModel that made the view.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace deltaserve::runtime {

struct TensorView {
  std::string name;
  kernels::DType type = kernels::DType::F32;
  int num_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] = elements per row (innermost)
  const std::byte* data = nullptr;
  size_t num_bytes = 0;

  int64_t num_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t num_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return kernels::dtype_row_bytes(type, ne[0]); }
  const std::byte* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
};

}  // namespace deltaserve::runtime
