#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"

namespace deltaserve::kernels {

void paged_attention_ref(const PagedAttentionArgs& a, const ParallelFor& pf) {
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t kv_row = a.num_kv_heads * a.head_dim;  // floats per cached position
  pf.run(a.num_rows * a.num_heads, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / a.num_heads, h = item % a.num_heads;
      const int64_t kvh = h / group;
      const int64_t num_keys = static_cast<int64_t>(a.positions[r]) + 1;
      const float* q = a.q + r * a.q_stride + h * a.q_head_stride;
      auto cached = [&](const float* cache, int64_t p) {
        const int64_t block = a.block_table[p / a.block_tokens];
        return cache + (block * a.block_tokens + p % a.block_tokens) * kv_row + kvh * a.head_dim;
      };
      scores.resize(static_cast<size_t>(num_keys));
      float max_score = -INFINITY;
      for (int64_t p = 0; p < num_keys; ++p) {
        const float* k = cached(a.k_cache, p);
        float dot = 0.0f;
        for (int64_t i = 0; i < a.head_dim; ++i) dot += q[i] * k[i];
        scores[static_cast<size_t>(p)] = dot * a.scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(p)]);
      }
      float total = 0.0f;
      for (float& s : scores) total += (s = std::exp(s - max_score));
      float* o = a.out + r * a.out_stride + h * a.head_dim;
      std::fill(o, o + a.head_dim, 0.0f);
      for (int64_t p = 0; p < num_keys; ++p) {
        const float* v = cached(a.v_cache, p);
        const float w = scores[static_cast<size_t>(p)] / total;
        for (int64_t i = 0; i < a.head_dim; ++i) o[i] += w * v[i];
      }
      const float* gate = a.gate + r * a.q_stride + h * a.q_head_stride;
      for (int64_t i = 0; i < a.head_dim; ++i) o[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
    }
  });
}

}  // namespace deltaserve::kernels
