// Random blocks per weight type. Quantised blocks get random quants and scales chosen from
// the quant distribution, so no quantiser runs and no float buffer is needed:
//   Q8_0  q uniform in [-128, 127] (RMS 73.9), d = std / 73.9
//   Q4_0  q uniform in [0, 15], value (q - 8) d (RMS 4.64 |d|), d of random sign (zero mean)
//   Q4_K  sub-block scale sc in [16, 31], min m = round(7.5 sc / 8) with dmin = 8 d, so a
//         value d (sc q - 8 m) ~ d sc (q - 7.5) is centred; RMS 4.61 * 23.95 d
//   Q5_K  as Q4_K with q in [0, 31]: m = round(15.5 sc / 8) (<= 60, within 6 bits), dmin = 8 d,
//         value ~ d sc (q - 15.5); RMS 9.23 * 23.95 d
//   Q6_K  q uniform in [0, 63], value d sc (q - 32) (RMS 18.48), sc in +-[16, 31]
// Each block's scale is jittered by a factor in [0.75, 1.25] so blocks differ.
#include "runtime/synthetic_fill.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/float16.h"
#include "kernels/quant_blocks.h"

namespace deltaserve::runtime::synthetic {

namespace {

using kernels::DType;

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr float kSqrt3 = 1.7320508f;
constexpr float kQ8Rms = 73.9f;     // sqrt(mean of k^2, k in [-128, 127])
constexpr float kQ4Rms = 4.637f;    // sqrt(mean of (q - 8)^2, q in [0, 15])
constexpr float kQ4KRms = 4.61f * 23.95f;   // (q - 7.5) times the RMS of sc in [16, 31]
constexpr float kQ5KRms = 9.233f * 23.95f;  // (q - 15.5), q in [0, 31], likewise
constexpr float kQ6KRms = 18.48f * 23.95f;  // (q - 32) times the RMS of |sc| in [16, 31]

uint64_t finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// [0, 1) from the top 24 bits of a word.
float unit_float(uint64_t w) { return static_cast<float>(w >> 40) * 0x1p-24f; }
float jitter(uint64_t w) { return 0.75f + 0.5f * unit_float(w); }

// Four elements per hash word (16 bits each): a uniform on 65536 levels is plenty for
// random weights and keeps BF16/F16 generation at memory speed.
template <typename Convert>
void fill_floats(const Stream& s, const Fill& f, int64_t first, int64_t n, Convert store) {
  const float half_width = f.std * kSqrt3;  // uniform with this std
  for (int64_t i = 0; i < n;) {
    const uint64_t e = static_cast<uint64_t>(first + i);
    const uint64_t w = s.word(e / 4);
    for (uint64_t j = e % 4; j < 4 && i < n; ++j, ++i) {
      const float u = (static_cast<float>((w >> (16 * j)) & 0xFFFF) + 0.5f) * 0x1p-16f;
      store(i, f.mean + half_width * (2.0f * u - 1.0f));
    }
  }
}

// Bytes [0, 8 * words) of dst from the stream's words at counters c, c + 1, ...
void copy_words(const Stream& s, uint64_t c, int words, uint8_t* dst) {
  for (int k = 0; k < words; ++k) {
    const uint64_t w = s.word(c + static_cast<uint64_t>(k));
    std::memcpy(dst + 8 * k, &w, 8);
  }
}

// A K-quant super-block's eight 6-bit scales (16..31, from the word ws) with mins at mid / 8
// of each scale (mid: the middle of the quant range, so elements centre on zero), packed, and
// d / dmin for d.
template <class Block>
void fill_k4_scales(uint64_t ws, double mid, float d, Block& out) {
  int scale[8], min[8];
  for (int j = 0; j < 8; ++j) {
    scale[j] = 16 + static_cast<int>((ws >> (4 * j)) & 15);
    min[j] = static_cast<int>(std::lround(mid * scale[j] / 8.0));
  }
  pack_scale_min_k4(scale, min, out.scales);
  out.d = kernels::fp32_to_fp16(d);
  out.dmin = kernels::fp32_to_fp16(8.0f * d);
}

void fill_q8_0(const Stream& s, const Fill& f, int64_t first, int64_t n, kernels::BlockQ8_0* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(first + i) * 5;
    copy_words(s, c, 4, reinterpret_cast<uint8_t*>(out[i].qs));
    out[i].d = kernels::fp32_to_fp16(f.std / kQ8Rms * jitter(s.word(c + 4)));
  }
}

void fill_q4_0(const Stream& s, const Fill& f, int64_t first, int64_t n, kernels::BlockQ4_0* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(first + i) * 3;
    const uint64_t w0 = s.word(c), w1 = s.word(c + 1), w2 = s.word(c + 2);
    std::memcpy(out[i].qs, &w0, 8);
    std::memcpy(out[i].qs + 8, &w1, 8);
    const float sign = (w2 & 1) ? -1.0f : 1.0f;
    out[i].d = kernels::fp32_to_fp16(sign * f.std / kQ4Rms * jitter(w2));
  }
}

void fill_q4_k(const Stream& s, const Fill& f, int64_t first, int64_t n, kernels::BlockQ4_K* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(first + i) * 18;
    copy_words(s, c, 16, out[i].qs);
    fill_k4_scales(s.word(c + 16), 7.5, f.std / kQ4KRms * jitter(s.word(c + 17)), out[i]);
  }
}

void fill_q5_k(const Stream& s, const Fill& f, int64_t first, int64_t n, kernels::BlockQ5_K* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(first + i) * 22;
    copy_words(s, c, 16, out[i].qs);
    copy_words(s, c + 16, 4, out[i].qh);
    fill_k4_scales(s.word(c + 20), 15.5, f.std / kQ5KRms * jitter(s.word(c + 21)), out[i]);
  }
}

void fill_q6_k(const Stream& s, const Fill& f, int64_t first, int64_t n, kernels::BlockQ6_K* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(first + i) * 27;
    copy_words(s, c, 16, out[i].ql);
    copy_words(s, c + 16, 8, out[i].qh);
    for (int k = 0; k < 2; ++k) {
      const uint64_t w = s.word(c + 24 + static_cast<uint64_t>(k));
      for (int j = 0; j < 8; ++j) {
        const int byte = static_cast<int>((w >> (8 * j)) & 0xFF);
        const int magnitude = 16 + (byte & 15);
        out[i].scales[8 * k + j] = static_cast<int8_t>((byte & 0x80) ? -magnitude : magnitude);
      }
    }
    out[i].d = kernels::fp32_to_fp16(f.std / kQ6KRms * jitter(s.word(c + 26)));
  }
}

}  // namespace

Stream Stream::of(uint64_t seed, std::string_view tensor_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name: independent of tensor order
  for (char ch : tensor_name) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  return Stream{finalize(finalize(seed + kGolden) ^ h)};
}

uint64_t Stream::word(uint64_t counter) const { return finalize(key + (counter + 1) * kGolden); }

void pack_scale_min_k4(const int scale[8], const int min[8], uint8_t scales[12]) {
  std::memset(scales, 0, 12);
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(scale[s] & 63);
    scales[s + 4] = static_cast<uint8_t>(min[s] & 63);
  }
  for (int s = 4; s < 8; ++s) {
    scales[s + 4] = static_cast<uint8_t>((scale[s] & 15) | ((min[s] & 15) << 4));
    scales[s - 4] |= static_cast<uint8_t>(((scale[s] >> 4) & 3) << 6);
    scales[s] |= static_cast<uint8_t>(((min[s] >> 4) & 3) << 6);
  }
}

void fill_blocks(DType type, const Stream& s, const Fill& f, int64_t first, int64_t n, std::byte* dst) {
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16 && f.mean != 0.0f) {
    throw std::logic_error("synthetic weights: quantised tensors must have mean 0");
  }
  switch (type) {
    case DType::F32: {
      float* out = reinterpret_cast<float*>(dst);
      fill_floats(s, f, first, n, [out](int64_t i, float v) { out[i] = v; });
      return;
    }
    case DType::F16: {
      uint16_t* out = reinterpret_cast<uint16_t*>(dst);
      fill_floats(s, f, first, n, [out](int64_t i, float v) { out[i] = kernels::fp32_to_fp16(v); });
      return;
    }
    case DType::BF16: {
      uint16_t* out = reinterpret_cast<uint16_t*>(dst);
      fill_floats(s, f, first, n, [out](int64_t i, float v) { out[i] = kernels::fp32_to_bf16(v); });
      return;
    }
    case DType::Q8_0: return fill_q8_0(s, f, first, n, reinterpret_cast<kernels::BlockQ8_0*>(dst));
    case DType::Q4_0: return fill_q4_0(s, f, first, n, reinterpret_cast<kernels::BlockQ4_0*>(dst));
    case DType::Q4_K: return fill_q4_k(s, f, first, n, reinterpret_cast<kernels::BlockQ4_K*>(dst));
    case DType::Q5_K: return fill_q5_k(s, f, first, n, reinterpret_cast<kernels::BlockQ5_K*>(dst));
    case DType::Q6_K: return fill_q6_k(s, f, first, n, reinterpret_cast<kernels::BlockQ6_K*>(dst));
    default:
      throw std::invalid_argument("synthetic weights: no generator for type " + std::string(kernels::dtype_name(type)));
  }
}

}  // namespace deltaserve::runtime::synthetic
