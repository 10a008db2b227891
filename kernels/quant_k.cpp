// K-quant encoders (Q4_K, Q5_K, Q6_K): the search ggml's quantize_row_q{4,5,6}_K_ref do,
// written out step by step. Super-block = 256 elements; see quant_blocks.h for the layouts.
//
// Q4_K / Q5_K: each 32-element sub-block gets an affine fit x ~= scale * q - min (q in
// [0, nmax], min >= 0) by weighted least squares over a few candidate grids; the 8 scales
// and 8 mins are then quantised to 6 bits against the super-block maxima, and the quants are
// recomputed against the scales actually stored. Q6_K: each 16-element sub-block gets a
// symmetric fit x ~= scale * q (q in [-32, 31]), the 16 scales are quantised to int8.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/float16.h"
#include "kernels/quant_blocks.h"

namespace deltaserve::kernels {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group is all zeros

// Round to nearest, ties to even, for |v| < 2^22 (adding 1.5 * 2^23 leaves round(v) in the
// low mantissa bits); NaN maps to 0 and larger magnitudes clamp, so no input is undefined.
int nearest_int(float v) {
  if (!(std::fabs(v) <= 4194303.0f)) v = (v == v) ? std::copysign(4194303.0f, v) : 0.0f;
  const float shifted = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x7fffffu) - 0x400000;
}

int nearest_clamped(float v, int lo, int hi) { return std::clamp(nearest_int(v), lo, hi); }

struct AffineSearch {
  int nmax;     // quants in [0, nmax]
  float rmin;   // candidate grids: nmax + rmin + rdelta * step levels over [min, max]
  float rdelta;
  int num_steps;
};

struct AffineFit {
  float scale;
  float min;  // subtracted: x ~= scale * q - min, min >= 0
};

// Fits 32 values x with weights w; writes the quants to q. ggml's make_qkx2_quants.
AffineFit fit_affine(const float* x, const float* w, const AffineSearch& search, uint8_t* q) {
  constexpr int n = 32;
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;  // the offset only ever shifts down
  if (hi == lo) {
    std::memset(q, 0, n);
    return {0.0f, -lo};
  }
  const float nmax = static_cast<float>(search.nmax);
  float inv_scale = nmax / (hi - lo);
  float scale = 1 / inv_scale;
  float offset = lo;  // x ~= scale * q + offset
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(nearest_clamped(inv_scale * (x[i] - lo), 0, search.nmax));
    const float diff = scale * q[i] + lo - x[i];
    const float sq = diff * diff;
    best_error += w[i] * sq;
  }
  uint8_t trial[n];
  for (int step = 0; step <= search.num_steps; ++step) {
    inv_scale = (search.rmin + search.rdelta * static_cast<float>(step) + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamped(inv_scale * (x[i] - lo), 0, search.nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    // Weighted least squares for (scale, offset) given the trial quants; offset capped at 0.
    float trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float trial_offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (trial_offset > 0) {
      trial_offset = 0;
      trial_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = trial_scale * trial[i] + trial_offset - x[i];
      const float sq = diff * diff;
      error += w[i] * sq;
    }
    if (error < best_error) {
      std::memcpy(q, trial, n);
      best_error = error;
      scale = trial_scale;
      offset = trial_offset;
    }
  }
  return {scale, -offset};
}

// One Q4_K/Q5_K super-block: fits the 8 sub-blocks, stores d, dmin and the packed 6-bit
// scales/mins, and leaves the final quants (in [0, nmax]) in q[256].
void encode_affine_superblock(const float* x, const AffineSearch& search, uint16_t& d16,
                              uint16_t& dmin16, uint8_t* scales, uint8_t* q) {
  AffineFit fits[8];
  float max_scale = 0, max_min = 0;
  float w[32];
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);  // favour large values
    fits[s] = fit_affine(xs, w, search, q + 32 * s);
    max_scale = std::max(max_scale, fits[s].scale);
    max_min = std::max(max_min, fits[s].min);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales, 0, 12);
  for (int s = 0; s < 8; ++s) {
    const int ls = nearest_clamped(inv_scale * fits[s].scale, 0, 63);
    const int lm = nearest_clamped(inv_min * fits[s].min, 0, 63);
    if (s < 4) {
      scales[s] = static_cast<uint8_t>(scales[s] | ls);
      scales[s + 4] = static_cast<uint8_t>(scales[s + 4] | lm);
    } else {  // low 4 bits in scales[s + 4], top 2 bits in the spare top bits of [s - 4], [s]
      scales[s + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[s - 4] = static_cast<uint8_t>(scales[s - 4] | ((ls >> 4) << 6));
      scales[s] = static_cast<uint8_t>(scales[s] | ((lm >> 4) << 6));
    }
  }
  d16 = fp32_to_fp16(max_scale / 63.f);
  dmin16 = fp32_to_fp16(max_min / 63.f);
  // Requantise against the scales as stored (6-bit, times the f16 super-scales).
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    scale_min_k4(s, scales, sc, m);
    const float d = fp16_to_fp32(d16) * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = fp16_to_fp32(dmin16) * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      q[32 * s + i] = static_cast<uint8_t>(nearest_clamped((x[32 * s + i] + dm) / d, 0, search.nmax));
    }
  }
}

// Symmetric fit of 16 values with weights x^2, q + 32 in [0, 63] written to q; returns the
// scale (negative when the largest-magnitude value is positive: it maps to q = -32, the
// longer side of the range). ggml's make_qx_quants(16, 32, x, L, rmse_type = 1, NULL).
float fit_symmetric(const float* x, uint8_t* q) {
  constexpr int n = 16, nmax = 32;
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(q, 0, n);
    return 0.f;
  }
  // Sums of w*x*l and w*l^2 (w = x^2) for quants at inverse scale inv_scale.
  auto sums = [&](float inv_scale, float& sum_lx, float& sum_l2) {
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamped(inv_scale * x[i], -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
  };
  auto assign = [&](float inv_scale) {
    for (int i = 0; i < n; ++i) {
      q[i] = static_cast<uint8_t>(nearest_clamped(inv_scale * x[i], -nmax, nmax - 1) + nmax);
    }
  };
  float sum_lx, sum_l2;
  float inv_scale = -nmax / max;
  sums(inv_scale, sum_lx, sum_l2);
  assign(inv_scale);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    inv_scale = -(nmax + 0.1f * static_cast<float>(step)) / max;
    sums(inv_scale, sum_lx, sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      assign(inv_scale);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

void encode_q6_k(const float* x, BlockQ6_K& b) {
  uint8_t q[256];  // biased quants, q - 32 in [-32, 31]
  float sub_scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int s = 0; s < 16; ++s) {
    sub_scales[s] = fit_symmetric(x + 16 * s, q + 16 * s);
    if (std::fabs(sub_scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(sub_scales[s]);
      max_scale = sub_scales[s];
    }
  }
  std::memset(&b, 0, sizeof(b));
  if (!(max_abs_scale >= kGroupMaxEps)) return;  // all (near) zero: d = 0 decodes to zeros
  // The largest sub-scale maps to -128 so int8 scales keep its full precision.
  const float inv_scale = -128.f / max_scale;
  b.d = fp32_to_fp16(1 / inv_scale);
  for (int s = 0; s < 16; ++s) {
    b.scales[s] = static_cast<int8_t>(nearest_clamped(inv_scale * sub_scales[s], -128, 127));
  }
  for (int s = 0; s < 16; ++s) {  // requantise against the scales as stored
    const float d = fp16_to_fp32(b.d) * static_cast<float>(b.scales[s]);
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) {
      q[16 * s + i] = static_cast<uint8_t>(nearest_clamped(x[16 * s + i] / d, -32, 31) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* qq = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      b.ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
      b.ql[64 * h + l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
      b.qh[32 * h + l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                              ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

void quantize_blocks(const float* src, BlockQ4_K* dst, int64_t num_blocks) {
  const AffineSearch search{15, -1.0f, 0.1f, 20};
  uint8_t q[256];
  for (int64_t b = 0; b < num_blocks; ++b) {
    encode_affine_superblock(src + b * kKQuantElements, search, dst[b].d, dst[b].dmin,
                             dst[b].scales, q);
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        dst[b].qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
      }
    }
  }
}

void quantize_blocks(const float* src, BlockQ5_K* dst, int64_t num_blocks) {
  const AffineSearch search{31, -0.5f, 0.1f, 15};
  uint8_t q[256];
  for (int64_t b = 0; b < num_blocks; ++b) {
    encode_affine_superblock(src + b * kKQuantElements, search, dst[b].d, dst[b].dmin,
                             dst[b].scales, q);
    std::memset(dst[b].qh, 0, sizeof(dst[b].qh));
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
        dst[b].qs[32 * g + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        dst[b].qh[l] = static_cast<uint8_t>(dst[b].qh[l] | ((lo >> 4) << (2 * g)) |
                                            ((hi >> 4) << (2 * g + 1)));
      }
    }
  }
}

void quantize_blocks(const float* src, BlockQ6_K* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b) encode_q6_k(src + b * kKQuantElements, dst[b]);
}

}  // namespace deltaserve::kernels
