// Row norms of the Qwen3.5 hybrid (MODEL.md 2.2). All compute in fp32.
#pragma once

#include <cstdint>

#include "kernels/parallel.h"

namespace deltaserve::kernels {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, over num_rows rows of width n. For the
// zero-centred RMSNorm1p, w already holds (1 + w) as GGUF stores it. y may alias x.
struct RmsNormArgs {
  const float* x;
  int64_t x_stride;
  const float* w;  // [n]
  float* y;
  int64_t y_stride;
  int64_t num_rows;
  int64_t n;
  float eps;
};
void rms_norm_ref(const RmsNormArgs& args, const ParallelFor& pf);

// GDN output norm per value head: y = x / sqrt(mean(x^2) + eps) * w * SiLU(z), over groups of
// n = dv values; w is shared by all groups. num_groups = rows * heads, all contiguous.
struct GatedRmsNormArgs {
  const float* x;  // [num_groups][n]
  const float* z;  // [num_groups][n]
  const float* w;  // [n]
  float* y;        // [num_groups][n], may alias x
  int64_t num_groups;
  int64_t n;
  float eps;
};
void gated_rms_norm_ref(const GatedRmsNormArgs& args, const ParallelFor& pf);

// x / sqrt(sum(x^2) + eps) in place over one vector of n (HF/FLA form, eps = 1e-6).
void l2_norm_ref(float* x, int64_t n, float eps);

}  // namespace deltaserve::kernels
