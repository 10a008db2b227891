// Counter-based random blocks for synthetic weights (used by synthetic_model.cpp).
// Block b of a tensor is a pure function of (seed, tensor name, b), so any split of the
// blocks over threads writes the same bytes. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/dtype.h"

namespace deltaserve::runtime::synthetic {

// Target distribution of the decoded values: mean and standard deviation (uniform for the
// float types; for quantised types the block scales are set so the decoded RMS is `std`
// and the mean is ~0; quantised tensors must have mean 0).
struct Fill {
  float mean = 0.0f;
  float std = 1.0f;
};

// splitmix64 evaluated at a counter: word(n) = finalize(key + (n + 1) * golden).
struct Stream {
  uint64_t key = 0;

  static Stream of(uint64_t seed, std::string_view tensor_name);
  uint64_t word(uint64_t counter) const;
};

// Writes blocks [first_block, first_block + num_blocks) of a tensor of `type` at dst
// (dst = the first of those blocks; 2-byte aligned). Block = 1 element for F32/F16/BF16.
void fill_blocks(kernels::DType type, const Stream& stream, const Fill& fill, int64_t first_block,
                 int64_t num_blocks, std::byte* dst);

// Packs 6-bit scale/min pairs of eight sub-blocks into a K-quant scales[12] array, the
// inverse of kernels::scale_min_k4.
void pack_scale_min_k4(const int scale[8], const int min[8], uint8_t scales[12]);

}  // namespace deltaserve::runtime::synthetic
