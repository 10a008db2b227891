// Causal depthwise conv1d + SiLU over one sequence's rows, with the rolling state of the
// last (kernel - 1) pre-conv inputs (MODEL.md 2.5 step 2). Channels are independent.
#pragma once

#include <cstdint>

#include "kernels/parallel.h"

namespace deltaserve::kernels {

struct CausalConvArgs {
  const float* x;      // [num_tokens][x_stride]: pre-conv inputs, channels contiguous
  int64_t x_stride;
  float* y;            // [num_tokens][y_stride]: SiLU(conv) outputs
  int64_t y_stride;
  float* state;        // [kernel - 1][channels], oldest first; replaced by the newest inputs
  const float* w;      // [channels][kernel]: w[c][kernel-1] multiplies the current token
  int64_t num_tokens;
  int64_t channels;
  int64_t kernel;      // Kc (4)
  // Optional: the state after each row, [num_tokens][kernel - 1][channels] (verify rows).
  float* state_after_row = nullptr;
};
void causal_conv1d_silu_ref(const CausalConvArgs& args, const ParallelFor& pf);

}  // namespace deltaserve::kernels
