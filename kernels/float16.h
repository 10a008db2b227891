// IEEE binary16 (F16) and bfloat16 (BF16) <-> binary32 conversions, bit-exact and branch-light
// so loops over them auto-vectorise. Pure functions; any thread.
//
// Rounding: f32 -> f16 and f32 -> bf16 round to nearest, ties to even (what ggml, numpy and
// the F16C/AVX512-BF16 instructions do), so GGUF files we write match theirs bit for bit.
// f16 -> f32 and bf16 -> f32 are exact. NaN stays NaN (quiet), +-inf stays +-inf, signed
// zeros keep their sign, f16 subnormals are handled in both directions.
#pragma once

#include <bit>
#include <cstdint>

namespace deltaserve::kernels {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa fields
  // Normal, inf, NaN: move the fields into f32 position with the exponent raised by 224, so
  // exponent 31 (inf/NaN) lands on 255, then scale by 2^-112: a net rebias of +112 (15 -> 127)
  // for normals, inf/NaN unchanged. All operands are normal floats (safe under DAZ/FTZ).
  const float normal = std::bit_cast<float>((em << 13) + (224u << 23)) * 0x1p-112f;
  // Zero, subnormal (em < 0x400): 0.5 + mantissa * 2^-24 built exactly in the mantissa of
  // 0.5, minus 0.5, leaves mantissa * 2^-24 exactly.
  const float tiny = std::bit_cast<float>((126u << 23) | em) - 0.5f;
  const uint32_t tiny_mask = 0u - static_cast<uint32_t>(em < 0x400u);  // select without a branch
  const uint32_t magnitude = (std::bit_cast<uint32_t>(tiny) & tiny_mask) |
                             (std::bit_cast<uint32_t>(normal) & ~tiny_mask);
  return std::bit_cast<float>(sign | magnitude);
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x38800000u) {  // >= 2^-14: normal in f16, or overflows to inf
    // Add half an f16 ulp (minus one unless the kept lsb is odd: ties to even); a carry out
    // of the mantissa correctly bumps the exponent.
    const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    const uint32_t h = (rounded >> 13) - (112u << 10);
    return static_cast<uint16_t>(sign | (h >= 0x7c00u ? 0x7c00u : h));
  }
  if (magnitude < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
  // Subnormal f16: value / 2^-24 = full mantissa >> (126 - exponent), shift in 14..24.
  const uint32_t exponent = magnitude >> 23;
  const uint32_t full_mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;
  uint32_t h = full_mantissa >> shift;
  const uint32_t remainder = full_mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (remainder > half || (remainder == half && (h & 1u))) ++h;  // may carry into the
  return static_cast<uint16_t>(sign | h);                         // smallest normal: fine
}

inline float bf16_to_fp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, force quiet so it stays NaN
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace deltaserve::kernels
