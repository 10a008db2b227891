// MoE routing and expert activation (MODEL.md 2.6): softmax over all experts in fp32, top-k,
// renormalise the k weights to sum 1; SwiGLU for expert and dense FFNs; the down products and
// weighted combine the GPU runs as one launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/parallel.h"

namespace deltaserve::kernels {

struct MoeRouteArgs {
  const float* logits;  // [num_rows][num_experts]
  int64_t num_rows;
  int64_t num_experts;
  int64_t num_used;     // k
  int32_t* expert_ids;  // [num_rows][k], by descending weight (ties: lower id first)
  float* weights;       // [num_rows][k], sum to 1 per row
};
void moe_route_ref(const MoeRouteArgs& args);

// y[i] = SiLU(gate[i]) * up[i] for n values; y may alias gate or up.
void swiglu_ref(const float* gate, const float* up, float* y, int64_t n);

// The MoE layer's down products and weighted combine for decode rows (one launch on the GPU:
// moe_down_combine_gpu, moe_down_combine_gpu.h, whose header says how it rounds), per token
// row r:
//   y[r] (+)= sum over rank < k of weights[r][rank] * (W_down[ids[r][rank]] g[r k + rank])
//             + sigmoid(shared_gate_logit[r]) * (W_shared_down shared_g[r])
// Pointers: device memory for the GPU form, host memory for the reference.
struct MoeDownCombineArgs {
  const uint8_t* down_exps;        // [num_experts][n rows of exp_row_bytes] Q4_0
  size_t expert_bytes;             // bytes per expert slice (n * exp_row_bytes or more)
  size_t exp_row_bytes;
  int64_t exp_in;                  // inputs per expert row (expert FFN width)
  const int32_t* expert_ids;       // [num_rows][num_used]
  const float* expert_weights;     // [num_rows][num_used]
  int64_t num_used;                // k
  const float* exp_g;              // [num_rows * k][exp_in]: SiLU(gate) * up of each (row, rank) pair
  const uint8_t* down_shexp;       // [n rows of sh_row_bytes] Q4_0, or null (no shared expert)
  size_t sh_row_bytes;
  int64_t sh_in;                   // shared expert FFN width
  const float* sh_g;               // [num_rows][sh_in]
  const float* shared_gate_logit;  // [num_rows]
  float* y;                        // [num_rows][n]
  int64_t n;                       // outputs (the model width)
  int64_t num_rows;
  bool accumulate = false;         // y += (the residual add), else y =
  const float* norm_w = nullptr;   // [n] next input norm (1 + w as stored), or null
  float norm_eps = 0.0f;
  float* norm_out = nullptr;       // [num_rows][norm_out_stride]; must not overlap y or the inputs
  int64_t norm_out_stride = 0;
  unsigned* norm_counters = nullptr;  // [num_rows], zero between launches (left zero); with norm_w
};

// The reference: each product by matmul_ref (its f32 bits), the weighted sum and the residual
// in double, rounded once per output (the value the kernel's f32 sums approximate). Only y:
// the norm epilogue's reference is rms_norm_ref over the final rows (norm_* and counters are
// ignored). Blocks until done; products spread through `parallel`.
void moe_down_combine_ref(const MoeDownCombineArgs& args, const ParallelFor& parallel);

}  // namespace deltaserve::kernels
