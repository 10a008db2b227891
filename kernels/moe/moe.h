// MoE routing and expert activation (MODEL.md 2.6): softmax over all experts in fp32, top-k,
// renormalise the k weights to sum 1; SwiGLU for expert and dense FFNs.
#pragma once

#include <cstdint>

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

}  // namespace deltaserve::kernels
