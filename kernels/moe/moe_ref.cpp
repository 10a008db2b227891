#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/moe/moe.h"

namespace deltaserve::kernels {

void moe_route_ref(const MoeRouteArgs& a) {
  std::vector<float> probs(static_cast<size_t>(a.num_experts));
  std::vector<int32_t> order(static_cast<size_t>(a.num_experts));
  for (int64_t r = 0; r < a.num_rows; ++r) {
    const float* logits = a.logits + r * a.num_experts;
    const float max_logit = *std::max_element(logits, logits + a.num_experts);
    float total = 0.0f;
    for (int64_t e = 0; e < a.num_experts; ++e)
      total += (probs[static_cast<size_t>(e)] = std::exp(logits[e] - max_logit));
    for (float& p : probs) p /= total;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + a.num_used, order.end(), [&](int32_t x, int32_t y) {
      const float px = probs[static_cast<size_t>(x)], py = probs[static_cast<size_t>(y)];
      return px > py || (px == py && x < y);
    });
    float selected = 0.0f;
    for (int64_t i = 0; i < a.num_used; ++i) selected += probs[static_cast<size_t>(order[static_cast<size_t>(i)])];
    for (int64_t i = 0; i < a.num_used; ++i) {
      const int32_t e = order[static_cast<size_t>(i)];
      a.expert_ids[r * a.num_used + i] = e;
      a.weights[r * a.num_used + i] = probs[static_cast<size_t>(e)] / selected;
    }
  }
}

void swiglu_ref(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace deltaserve::kernels
