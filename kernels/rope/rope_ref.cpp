#include <cmath>
#include <vector>

#include "kernels/rope/rope.h"

namespace deltaserve::kernels {

void rope_neox_ref(const RopeArgs& a) {
  const int64_t half = a.rope_dims / 2;
  // Frequencies in fp32 as transformers computes them (inv_freq = 1 / base^(2i/R)).
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(a.rope_dims);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(a.base, exponent);
  }
  for (int64_t r = 0; r < a.num_rows; ++r) {
    const float pos = static_cast<float>(a.positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<size_t>(i)];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < a.num_heads; ++h) {
        float* x = a.x + r * a.row_stride + h * a.head_stride;
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
      }
    }
  }
}

}  // namespace deltaserve::kernels
