// The sampling rule's arithmetic, one source for the host and the device, so a token drawn on
// a GPU is bit for bit the token the CPU reference (draw_ref.h) draws from the same logits.
//
// A sampled row's token t gets an integer mass: w_t = exp((l_t - l_top) / T) in float by
// exp_nonpositive (our own polynomial, every operation an IEEE-rounded multiply or add in a
// fixed order, never contracted into an FMA), then floor(w_t * 2^40). Tokens lighter than
// 2^-40 of the most likely one (about 1e-12) get mass 0 and are never drawn; so do -inf,
// NaN and min-p's drops. Because masses are integers, every sum of them is exact whatever
// its order: totals, top-p's prefix masses and the inverse-CDF walk agree between a
// sequential host loop and any parallel reduction on a device, with no tolerance.
//
// Pure functions of their arguments; any thread. Host translation units that include this
// must not contract floating point (kernels/ builds with -ffp-contract=off; ISO C++ mode's
// default is off too); device code uses the round-to-nearest intrinsics, which nvcc and
// hipcc never contract.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define DS_DRAW_FN __host__ __device__ __forceinline__
#else
#define DS_DRAW_FN inline
#endif

namespace deltaserve::kernels {

// One row's draw. The same fields as the request's SamplingParams after validation; temperature
// > 0 (greedy rows never reach the rule).
struct DrawParams {
  float inv_temperature = 1.0f;  // 1.0f / temperature (float division)
  float top_p = 1.0f;            // 1: off
  float min_p = 0.0f;            // 0: off; relative to the most likely token's weight
  int32_t top_k = 0;             // 0: off
  uint32_t word = 0;             // the draw's 32 random bits (runtime/sampler.h: Philox)
};

namespace draw {

constexpr float kMassScale = 1099511627776.0f;  // 2^40
// exp(a) * 2^40 < 1 below this argument (e^-28 = 6.9e-13 < 2^-40 = 9.1e-13): mass 0.
constexpr float kMinArgument = -28.0f;
// Totals stay below 2^63 for vocabularies up to 2^23 tokens.
constexpr int64_t kMaxVocab = int64_t{1} << 23;

DS_DRAW_FN float mul(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DS_DRAW_FN float add(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DS_DRAW_FN double dmul(double a, double b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DS_DRAW_FN uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return static_cast<uint32_t>(__float_as_int(f));
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
DS_DRAW_FN float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __int_as_float(static_cast<int>(u));
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// e^a for a in [kMinArgument, 0]: a = n ln2 + r (n by rounding a / ln2 to the nearest integer
// with the 1.5 * 2^23 trick; ln2 in two parts, n * hi exact), e^r by its Taylor polynomial to
// r^7 (|r| <= ln2 / 2: a few ulp), times 2^n built from its bits.
DS_DRAW_FN float exp_nonpositive(float a) {
  const float t = mul(a, 1.44269504088896341f);
  const float n = add(add(t, 12582912.0f), -12582912.0f);
  float r = add(a, mul(n, -0.693145751953125f));
  r = add(r, mul(n, -1.428606765330187e-06f));
  float p = 1.98412698e-4f;
  p = add(mul(p, r), 1.38888889e-3f);
  p = add(mul(p, r), 8.33333333e-3f);
  p = add(mul(p, r), 4.16666667e-2f);
  p = add(mul(p, r), 1.66666667e-1f);
  p = add(mul(p, r), 0.5f);
  p = add(mul(p, r), 1.0f);
  p = add(mul(p, r), 1.0f);
  const int exponent = static_cast<int>(n) + 127;  // n in [-41, 0]: a normal power of two
  return mul(p, bits_float(static_cast<uint32_t>(exponent) << 23));
}

// A token's mass given the row's most likely logit `top` (finite): 0 for -inf, NaN, weights
// under 2^-40 and min-p's drops.
DS_DRAW_FN uint64_t token_mass(float logit, float top, const DrawParams& p) {
  if (!(logit > -3.0e38f)) return 0;  // -inf, NaN (and -FLT_MAX-like values: below any mass)
  const float a = mul(add(logit, -top), p.inv_temperature);
  if (!(a >= kMinArgument)) return 0;
  const float w = exp_nonpositive(a);
  if (w < p.min_p) return 0;
  return static_cast<uint64_t>(mul(w, kMassScale));
}

// Likelihood order as an ascending 64-bit key: logit descending (-0 as +0), then id ascending.
// Mass never increases along it, so min-p, top-k and top-p each keep a prefix of it.
DS_DRAW_FN uint64_t likelihood_key(float logit, uint32_t id) {
  const uint32_t bits = float_bits(logit == 0.0f ? 0.0f : logit);
  const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits ^ 0x80000000u;
  return (static_cast<uint64_t>(~ascending) << 32) | id;
}

// The mass top-p's prefix must reach: ceil(top_p * total) in double, at least 1 (one token is
// always kept), at most total.
DS_DRAW_FN uint64_t top_p_target(uint64_t total, float top_p) {
  const double t = dmul(static_cast<double>(top_p), static_cast<double>(total));
  const uint64_t whole = static_cast<uint64_t>(t);  // t >= 0: truncation is floor
  const uint64_t target = static_cast<double>(whole) < t ? whole + 1 : whole;
  return target < 1 ? 1 : target > total ? total : target;
}

// The inverse CDF's point for 32 random bits: floor(total * word / 2^32), in [0, total).
DS_DRAW_FN uint64_t draw_target(uint64_t total, uint32_t word) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __umul64hi(total, static_cast<uint64_t>(word) << 32);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(total) * word) >> 32);
#endif
}

}  // namespace draw
}  // namespace deltaserve::kernels
