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
  size_t num_bytes = 0;  // bytes of the elements (not of the span when slices are strided)
  // Bytes from one ne[2] slice (one expert) to the next. 0 = contiguous, i.e.
  // ne[1] * row_bytes(). Nonzero only for the two halves of a fused ffn_gate_up_exps
  // tensor, whose experts are 2*Ie rows apart; row() and slice() honour it, raw
  // `data + offset` arithmetic does not (check is_contiguous() first).
  size_t slice_stride_bytes = 0;

  int64_t num_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t num_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return kernels::dtype_row_bytes(type, ne[0]); }
  size_t slice_stride() const {
    return slice_stride_bytes != 0 ? slice_stride_bytes : static_cast<size_t>(ne[1]) * row_bytes();
  }
  bool is_contiguous() const { return slice_stride() == static_cast<size_t>(ne[1]) * row_bytes(); }
  // Slice i2 of a tensor with ne[3] == 1 (expert i2 of a stacked expert tensor).
  const std::byte* slice(int64_t i2) const { return data + static_cast<size_t>(i2) * slice_stride(); }
  const std::byte* row(int64_t r) const {
    if (slice_stride_bytes == 0) return data + static_cast<size_t>(r) * row_bytes();
    return slice(r / ne[1]) + static_cast<size_t>(r % ne[1]) * row_bytes();
  }
};

}  // namespace deltaserve::runtime
