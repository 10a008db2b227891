// Weight formats: f16/bf16 conversions, known-answer block layouts (raw bytes at ggml's offsets
// -> expected floats from the documented formulas), quantise/dequantise error bounds, dot_row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/float16.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace deltaserve::kernels {
namespace {

constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                               DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

float bits_to_float(uint32_t b) { return std::bit_cast<float>(b); }

void put_u16(std::vector<uint8_t>& bytes, size_t offset, uint16_t v) {
  bytes[offset] = static_cast<uint8_t>(v & 0xff);  // little endian, as in the file
  bytes[offset + 1] = static_cast<uint8_t>(v >> 8);
}

std::vector<float> dequantize(DType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

// ---- f16 / bf16 ----

TEST(Float16, DecodesEdgeCases) {
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(0x0000)), 0x00000000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));                  // min subnormal
  EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));               // max subnormal
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));                  // min normal
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_fp32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));  // signalling payload stays NaN
}

TEST(Float16, EveryHalfDecodesToItsValueAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (exponent == 31) {
      EXPECT_EQ(std::isnan(f), mantissa != 0) << h;
      continue;
    }
    const float expected = exponent == 0 ? sign * std::ldexp(static_cast<float>(mantissa), -24)
                                         : sign * std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
    ASSERT_EQ(f, expected) << h;
    ASSERT_EQ(fp32_to_fp16(f), h) << h;
  }
}

// Exhaustive rounding boundaries: between consecutive positive halves a and b, the exact
// midpoint goes to the even one, anything above it to b, below it to a.
TEST(Float16, RoundsToNearestEvenAtEveryMidpoint) {
  for (uint32_t a = 0; a < 0x7bff; ++a) {
    const float lo = fp16_to_fp32(static_cast<uint16_t>(a));
    const float hi = fp16_to_fp32(static_cast<uint16_t>(a + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact in f32
    const uint16_t even = (a & 1) ? static_cast<uint16_t>(a + 1) : static_cast<uint16_t>(a);
    ASSERT_EQ(fp32_to_fp16(mid), even) << a;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, 1e9f)), a + 1) << a;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, 0.0f)), a) << a;
    ASSERT_EQ(fp32_to_fp16(-mid), even | 0x8000) << a;
  }
}

TEST(Float16, EncodesOverflowUnderflowAndSpecials) {
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);  // below the midpoint to "65536"
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // the midpoint: ties to even = inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the min subnormal: to even
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(bits_to_float(0x7f800001u)))));  // sNaN
}

TEST(BFloat16, ConvertsWithRoundToNearestEven) {
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(bits_to_float(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(bits_to_float(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(bits_to_float(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(fp32_to_bf16(bits_to_float(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(bits_to_float(0x00000001u)), 0x0000);  // f32 subnormal rounds to 0
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(bits_to_float(0x7f800001u)))));  // sNaN
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t b = 0; b < 0x10000; ++b) {  // every non-NaN bf16 round-trips
    const float f = bf16_to_fp32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), b) << b;
    }
  }
}

// ---- known-answer block layouts: raw bytes at ggml's offsets ----

TEST(BlockLayout, Q8_0) {
  std::vector<uint8_t> bytes(34);
  put_u16(bytes, 0, 0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) bytes[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  const std::vector<float> v = dequantize(DType::Q8_0, bytes, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(v[j], (j - 16) * 0.5f) << j;
}

TEST(BlockLayout, Q4_0) {
  std::vector<uint8_t> bytes(18);
  put_u16(bytes, 0, 0x4000);  // d = 2
  for (int j = 0; j < 16; ++j) bytes[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> v = dequantize(DType::Q4_0, bytes, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], (j - 8) * 2.0f) << j;              // low nibbles: elements 0..15
    EXPECT_EQ(v[j + 16], (15 - j - 8) * 2.0f) << j;    // high nibbles: elements 16..31
  }
}

// 6-bit scales {1,2,3,4,17,33,49,63} and mins {5,6,7,8,20,40,60,0}, packed by hand.
constexpr int kScales[8] = {1, 2, 3, 4, 17, 33, 49, 63};
constexpr int kMins[8] = {5, 6, 7, 8, 20, 40, 60, 0};
constexpr uint8_t kPackedScales[12] = {65, 130, 195, 196, 69, 134, 199, 8, 65, 129, 193, 15};

TEST(BlockLayout, KQuantScalePacking) {
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    scale_min_k4(s, kPackedScales, sc, m);
    EXPECT_EQ(sc, kScales[s]) << s;
    EXPECT_EQ(m, kMins[s]) << s;
  }
}

TEST(BlockLayout, Q4_K) {
  std::vector<uint8_t> bytes(144);
  put_u16(bytes, 0, 0x3c00);  // d = 1
  put_u16(bytes, 2, 0x3800);  // dmin = 0.5
  std::memcpy(bytes.data() + 4, kPackedScales, 12);
  for (int i = 0; i < 128; ++i) bytes[16 + i] = static_cast<uint8_t>(i * 37 + 11);
  const std::vector<float> v = dequantize(DType::Q4_K, bytes, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 64, within = e % 64, l = within % 32;
    const int s = 2 * g + within / 32;
    const uint8_t byte = bytes[16 + 32 * g + l];
    const int q = within < 32 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(v[e], 1.0f * kScales[s] * q - 0.5f * kMins[s]) << e;
  }
}

TEST(BlockLayout, Q5_K) {
  std::vector<uint8_t> bytes(176);
  put_u16(bytes, 0, 0x3c00);  // d = 1
  put_u16(bytes, 2, 0x3800);  // dmin = 0.5
  std::memcpy(bytes.data() + 4, kPackedScales, 12);
  for (int l = 0; l < 32; ++l) bytes[16 + l] = static_cast<uint8_t>(l * 73 + 5);       // qh
  for (int i = 0; i < 128; ++i) bytes[48 + i] = static_cast<uint8_t>(i * 37 + 11);    // qs
  const std::vector<float> v = dequantize(DType::Q5_K, bytes, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 64, within = e % 64, l = within % 32, upper = within / 32;
    const int s = 2 * g + upper;
    const uint8_t byte = bytes[48 + 32 * g + l];
    const int high_bit = (bytes[16 + l] >> (2 * g + upper)) & 1;
    const int q = (upper ? (byte >> 4) : (byte & 15)) + 16 * high_bit;
    EXPECT_EQ(v[e], 1.0f * kScales[s] * q - 0.5f * kMins[s]) << e;
  }
}

TEST(BlockLayout, Q6_K) {
  std::vector<uint8_t> bytes(210);
  for (int i = 0; i < 128; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);          // ql
  for (int i = 0; i < 64; ++i) bytes[128 + i] = static_cast<uint8_t>(i * 73 + 5);      // qh
  for (int s = 0; s < 16; ++s) bytes[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s - 8));
  put_u16(bytes, 208, 0x3400);  // d = 0.25
  const std::vector<float> v = dequantize(DType::Q6_K, bytes, 256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t low_byte = bytes[64 * h + l + (k % 2) * 32];
    const int low = k < 2 ? (low_byte & 15) : (low_byte >> 4);
    const int high = (bytes[128 + 32 * h + l] >> (2 * k)) & 3;
    const int scale = static_cast<int8_t>(bytes[192 + 8 * h + 2 * k + l / 16]);
    EXPECT_EQ(v[e], 0.25f * scale * ((low | (high << 4)) - 32)) << e;
  }
}

TEST(BlockLayout, FloatRows) {
  std::vector<uint8_t> f16(4), bf16(4);
  put_u16(f16, 0, 0x3c00);
  put_u16(f16, 2, 0xc100);  // -2.5
  put_u16(bf16, 0, 0x3fc0);  // 1.5
  put_u16(bf16, 2, 0xc120);  // -10
  EXPECT_EQ(dequantize(DType::F16, f16, 2), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(dequantize(DType::BF16, bf16, 2), (std::vector<float>{1.5f, -10.0f}));
}

// ---- quantisers ----

TEST(Quantize, SimpleBlocksHaveKnownBytes) {
  const std::vector<float> ones(32, 1.0f);
  std::vector<uint8_t> q8(34), q4(18);
  quantize_row(DType::Q8_0, ones.data(), q8.data(), 32);
  EXPECT_EQ(q8[0] | (q8[1] << 8), fp32_to_fp16(1.0f / 127.0f));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(static_cast<int8_t>(q8[2 + j]), 127);
  quantize_row(DType::Q4_0, ones.data(), q4.data(), 32);
  EXPECT_EQ(q4[0] | (q4[1] << 8), 0xb000);  // d = max / -8 = -0.125
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q4[2 + j], 0);  // (1 / -0.125) + 8.5 -> 0
  EXPECT_EQ(dequantize(DType::Q4_0, q4, 32), ones);
}

TEST(Quantize, ZerosStayZeros) {
  const std::vector<float> zeros(512, 0.0f);
  for (DType type : kAllTypes) {
    std::vector<uint8_t> bytes(dtype_row_bytes(type, 512));
    quantize_row(type, zeros.data(), bytes.data(), 512);
    EXPECT_EQ(dequantize(type, bytes, 512), zeros) << dtype_name(type);
  }
}

struct ErrorBound {
  DType type;
  double max_relative_rms;  // rms(error) / rms(x) on N(0, 1) data
};

TEST(Quantize, RoundTripErrorWithinBounds) {
  // Measured (this code, seed 7): F16 2.1e-4, BF16 1.6e-3, Q8_0 5.2e-3, Q6_K 1.76e-2,
  // Q5_K 3.6e-2, Q4_K 7.1e-2, Q4_0 8.4e-2 -- each close to step / sqrt(12) of its grid on
  // N(0, 1) data. Bounds leave ~25% headroom, so a layout or rounding bug fails.
  const ErrorBound bounds[] = {{DType::F32, 0.0},    {DType::F16, 2.7e-4},  {DType::BF16, 2e-3},
                               {DType::Q8_0, 6.5e-3}, {DType::Q6_K, 2.2e-2}, {DType::Q5_K, 4.5e-2},
                               {DType::Q4_K, 9e-2},   {DType::Q4_0, 1.05e-1}};
  const int64_t n = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (const ErrorBound& b : bounds) {
    std::vector<uint8_t> bytes(dtype_row_bytes(b.type, n));
    quantize_row(b.type, x.data(), bytes.data(), n);
    const std::vector<float> y = dequantize(b.type, bytes, n);
    double err2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      x2 += double(x[i]) * x[i];
    }
    EXPECT_LE(std::sqrt(err2 / x2), b.max_relative_rms) << dtype_name(b.type);
  }
}

// Per-element bounds for the symmetric 32-blocks: |error| <= d/2 (+ f16 rounding of d) for
// Q8_0; Q4_0 can be off by a whole step on the side opposite the extreme (quant 16 clamps to
// 15).
TEST(Quantize, Q8_0AndQ4_0PerElementBounds) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> x(32 * 64);
  for (float& v : x) v = uniform(rng);
  std::vector<uint8_t> q8(dtype_row_bytes(DType::Q8_0, 2048)), q4(dtype_row_bytes(DType::Q4_0, 2048));
  quantize_row(DType::Q8_0, x.data(), q8.data(), 2048);
  quantize_row(DType::Q4_0, x.data(), q4.data(), 2048);
  const std::vector<float> y8 = dequantize(DType::Q8_0, q8, 2048);
  const std::vector<float> y4 = dequantize(DType::Q4_0, q4, 2048);
  for (int64_t b = 0; b < 64; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      EXPECT_LE(std::fabs(y8[i] - x[i]), 0.51f * amax / 127 + 127 * amax / 127 / 1024) << i;
      EXPECT_LE(std::fabs(y4[i] - x[i]), 1.01f * amax / 8) << i;
    }
  }
}

TEST(Quantize, NonFiniteInputDoesNotCrash) {
  std::vector<float> x(512, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::infinity();
  x[300] = -std::numeric_limits<float>::infinity();
  x[301] = 3e38f;
  x[302] = 1e-42f;
  for (DType type : kAllTypes) {
    std::vector<uint8_t> bytes(dtype_row_bytes(type, 512));
    quantize_row(type, x.data(), bytes.data(), 512);
    (void)dequantize(type, bytes, 512);
  }
}

// ---- dot_row ----

TEST(DotRow, MatchesDotOfDequantisedRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType type : kAllTypes) {
    const int64_t block = dtype_traits(type).block_elements;
    for (int64_t n : {int64_t{256}, int64_t{768}, int64_t{37}, int64_t{8}, int64_t{0}}) {
      if (n % block != 0) continue;
      std::vector<float> w(n), x(n);
      for (float& v : w) v = normal(rng);
      for (float& v : x) v = normal(rng);
      std::vector<uint8_t> bytes(dtype_row_bytes(type, n));
      quantize_row(type, w.data(), bytes.data(), n);
      const std::vector<float> wd = dequantize(type, bytes, n);
      double expected = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        expected += double(wd[i]) * x[i];
        magnitude += std::fabs(double(wd[i]) * x[i]);
      }
      const float got = dot_row(type, bytes.data(), x.data(), n);
      EXPECT_NEAR(got, expected, 1e-6 * magnitude + 1e-30) << dtype_name(type) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels
