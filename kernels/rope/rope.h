// Partial NeoX rotary embedding (MODEL.md 2.4): the first rope_dims of each head rotate,
// element i paired with i + rope_dims/2; theta_i = base^(-2i/rope_dims); the rest pass.
// For text the interleaved M-RoPE sections reduce exactly to this.
#pragma once

#include <cstdint>

namespace deltaserve::kernels {

struct RopeArgs {
  float* x;                 // [num_rows][row_stride], heads at x + h * head_dim
  int64_t row_stride;       // floats between rows
  int64_t head_stride;      // floats between heads inside a row
  const int32_t* positions; // [num_rows]
  int64_t num_rows;
  int64_t num_heads;
  int64_t rope_dims;        // R, even
  float base;
};
void rope_neox_ref(const RopeArgs& args);

}  // namespace deltaserve::kernels
