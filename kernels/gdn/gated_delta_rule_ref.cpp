#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/gdn/gated_delta_rule.h"

namespace deltaserve::kernels {

void gated_delta_rule_ref(const GatedDeltaRuleArgs& a, const ParallelFor& pf) {
  const int64_t dk = a.head_dim_k, dv = a.head_dim_v;
  const int64_t state_per_head = dk * dv;
  pf.run(a.num_v_heads, [&](int64_t begin, int64_t end) {
    std::vector<float> e(static_cast<size_t>(dv)), delta(static_cast<size_t>(dv));
    for (int64_t j = begin; j < end; ++j) {
      const int64_t kh = j % a.num_k_heads;
      float* S = a.state + j * state_per_head;
      for (int64_t t = 0; t < a.num_tokens; ++t) {
        const float* q = a.q + t * a.qk_stride + kh * dk;
        const float* k = a.k + t * a.qk_stride + kh * dk;
        const float* v = a.v + t * a.v_stride + j * dv;
        const float decay = std::exp(a.g[t * a.num_v_heads + j]);
        const float beta = a.beta[t * a.num_v_heads + j];
        // Decay, then what the memory predicts for k: e = S^T k.
        std::fill(e.begin(), e.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* row = S + i * dv;
          const float ki = k[i];
          for (int64_t c = 0; c < dv; ++c) {
            row[c] *= decay;
            e[static_cast<size_t>(c)] += row[c] * ki;
          }
        }
        for (int64_t c = 0; c < dv; ++c) delta[static_cast<size_t>(c)] = beta * (v[c] - e[static_cast<size_t>(c)]);
        // Rank-1 write, then read-out from the updated state: o = S^T q.
        float* o = a.out + t * a.out_stride + j * dv;
        std::fill(o, o + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* row = S + i * dv;
          const float ki = k[i], qi = q[i];
          for (int64_t c = 0; c < dv; ++c) {
            row[c] += ki * delta[static_cast<size_t>(c)];
            o[c] += row[c] * qi;
          }
        }
        if (a.state_after_row != nullptr) {
          float* snapshot = a.state_after_row + (t * a.num_v_heads + j) * state_per_head;
          std::copy(S, S + state_per_head, snapshot);
        }
      }
    }
  });
}

}  // namespace deltaserve::kernels
