#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/matmul/matmul.h"
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

void moe_down_combine_ref(const MoeDownCombineArgs& a, const ParallelFor& parallel) {
  const size_t n = static_cast<size_t>(a.n);
  std::vector<float> out(n);
  std::vector<double> sum(n);
  // One product's output row into `out`: W (num_out = n rows of row_bytes) times x.
  auto product = [&](const uint8_t* w, size_t row_bytes, int64_t num_in, const float* x) {
    matmul_ref(MatmulArgs{w, DType::Q4_0, num_in, a.n, row_bytes, x, 1, num_in, out.data(), a.n}, parallel);
  };
  for (int64_t r = 0; r < a.num_rows; ++r) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t j = 0; j < a.num_used; ++j) {
      const int64_t pair = r * a.num_used + j;
      product(a.down_exps + static_cast<size_t>(a.expert_ids[pair]) * a.expert_bytes, a.exp_row_bytes, a.exp_in,
              a.exp_g + pair * a.exp_in);
      const double weight = a.expert_weights[pair];
      for (size_t i = 0; i < n; ++i) sum[i] += weight * out[i];
    }
    if (a.down_shexp != nullptr) {
      product(a.down_shexp, a.sh_row_bytes, a.sh_in, a.sh_g + r * a.sh_in);
      const double gate = 1.0 / (1.0 + std::exp(-static_cast<double>(a.shared_gate_logit[r])));
      for (size_t i = 0; i < n; ++i) sum[i] += gate * out[i];
    }
    float* y = a.y + r * a.n;
    for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>((a.accumulate ? y[i] : 0.0) + sum[i]);
  }
}

}  // namespace deltaserve::kernels
