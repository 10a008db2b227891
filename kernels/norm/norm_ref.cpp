#include <cmath>

#include "kernels/norm/norm.h"

namespace deltaserve::kernels {
namespace {

// Sum of squares in double: the reference should not lose precision to accumulation order.
float inverse_rms(const float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

void rms_norm_ref(const RmsNormArgs& a, const ParallelFor& pf) {
  pf.run(a.num_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = a.x + r * a.x_stride;
      float* y = a.y + r * a.y_stride;
      const float scale = inverse_rms(x, a.n, a.eps);
      for (int64_t i = 0; i < a.n; ++i) y[i] = x[i] * scale * a.w[i];
    }
  });
}

void gated_rms_norm_ref(const GatedRmsNormArgs& a, const ParallelFor& pf) {
  pf.run(a.num_groups, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const float* x = a.x + g * a.n;
      const float* z = a.z + g * a.n;
      float* y = a.y + g * a.n;
      const float scale = inverse_rms(x, a.n, a.eps);
      for (int64_t i = 0; i < a.n; ++i) y[i] = x[i] * scale * a.w[i] * silu(z[i]);
    }
  });
}

void l2_norm_ref(float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum + eps));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace deltaserve::kernels
