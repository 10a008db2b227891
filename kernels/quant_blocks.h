// ggml's block layouts (ggml-common.h), byte for byte, with one decoder per layout whose
// arithmetic is exactly ggml's dequantize_row_* (same f32 operations, same order, no fused
// multiply-add), and the per-layout encoders behind quantize_row. Pure functions; any thread.
//
// Blocks are read in place from the weight file: a block pointer must be 2-byte aligned
// (GGUF aligns tensor data to 32 bytes and every row size here is even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/float16.h"

namespace deltaserve::kernels {

inline constexpr int64_t kQ8_0Elements = 32;
inline constexpr int64_t kQ4_0Elements = 32;
inline constexpr int64_t kKQuantElements = 256;  // QK_K: one K-quant super-block

// value[j] = qs[j] * d.
struct BlockQ8_0 {
  uint16_t d;     // f16 scale
  int8_t qs[32];
};

// value[j] = ((qs[j] & 15) - 8) * d, value[j + 16] = ((qs[j] >> 4) - 8) * d, j < 16.
struct BlockQ4_0 {
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // low nibbles: elements 0..15, high nibbles: 16..31
};

// Eight 32-element sub-blocks; sub-block s has a 6-bit scale sc[s] and 6-bit min m[s]:
// value = (d * sc[s]) * q - (dmin * m[s]), q a 4-bit quant. qs[32g + l] holds element
// 64g + l in its low nibble and element 64g + 32 + l in its high nibble (g < 4, l < 32).
// scales[12] packing (see scale_min_k4): for s < 4, sc = scales[s] & 63, m = scales[s + 4]
// & 63; for s >= 4 the low 4 bits sit in scales[s + 4] (sc low nibble, m high nibble) and
// the top 2 bits in the top bits of scales[s - 4] (sc) and scales[s] (m).
struct BlockQ4_K {
  uint16_t d;      // f16 super-scale of the scales
  uint16_t dmin;   // f16 super-scale of the mins
  uint8_t scales[12];
  uint8_t qs[128];
};

// As Q4_K with 5-bit quants: the 5th bit of element 64g + l is bit 2g of qh[l], of element
// 64g + 32 + l bit 2g + 1 of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];   // high bits
  uint8_t qs[128];  // low 4 bits, nibble layout as Q4_K
};

// Sixteen 16-element sub-blocks with int8 scales: value = (d * scales[s]) * (q - 32), q a
// 6-bit quant. For each half h < 2 (128 elements) and l < 32, with ql = ql + 64h and
// qh = qh + 32h: element 128h + l      = ql[l] & 15      | ((qh[l] >> 0) & 3) << 4,
//                        128h + 32 + l = ql[l + 32] & 15 | ((qh[l] >> 2) & 3) << 4,
//                        128h + 64 + l = ql[l] >> 4      | ((qh[l] >> 4) & 3) << 4,
//                        128h + 96 + l = ql[l + 32] >> 4 | ((qh[l] >> 6) & 3) << 4.
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // per 16-element sub-block
  uint16_t d;         // f16 super-scale
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, qh) == 16 &&
              offsetof(BlockQ5_K, qs) == 48);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);

// 6-bit scale and min of sub-block s (< 8) from a K-quant scales[12] array.
inline void scale_min_k4(int s, const uint8_t* scales, int& scale, int& min) {
  if (s < 4) {
    scale = scales[s] & 63;
    min = scales[s + 4] & 63;
  } else {
    scale = (scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4);
    min = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

// ---- decoders: out receives the block's 32 (Q8_0, Q4_0) or 256 (K-quants) values ----

inline void decode_block(const BlockQ8_0& b, float* out) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
}

inline void decode_block(const BlockQ4_0& b, float* out) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
    out[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

inline void decode_block(const BlockQ4_K& b, float* out) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int g = 0; g < 4; ++g) {  // 64 elements: sub-blocks 2g (low nibbles) and 2g + 1
    int sc_lo, m_lo, sc_hi, m_hi;
    scale_min_k4(2 * g, b.scales, sc_lo, m_lo);
    scale_min_k4(2 * g + 1, b.scales, sc_hi, m_hi);
    const float d_lo = d * static_cast<float>(sc_lo), min_lo = dmin * static_cast<float>(m_lo);
    const float d_hi = d * static_cast<float>(sc_hi), min_hi = dmin * static_cast<float>(m_hi);
    const uint8_t* q = b.qs + 32 * g;
    float* o = out + 64 * g;
    for (int l = 0; l < 32; ++l) o[l] = d_lo * static_cast<float>(q[l] & 0xF) - min_lo;
    for (int l = 0; l < 32; ++l) o[l + 32] = d_hi * static_cast<float>(q[l] >> 4) - min_hi;
  }
}

inline void decode_block(const BlockQ5_K& b, float* out) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int g = 0; g < 4; ++g) {
    int sc_lo, m_lo, sc_hi, m_hi;
    scale_min_k4(2 * g, b.scales, sc_lo, m_lo);
    scale_min_k4(2 * g + 1, b.scales, sc_hi, m_hi);
    const float d_lo = d * static_cast<float>(sc_lo), min_lo = dmin * static_cast<float>(m_lo);
    const float d_hi = d * static_cast<float>(sc_hi), min_hi = dmin * static_cast<float>(m_hi);
    const uint8_t* q = b.qs + 32 * g;
    const int bit_lo = 2 * g, bit_hi = 2 * g + 1;
    float* o = out + 64 * g;
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] & 0xF) | (((b.qh[l] >> bit_lo) & 1) << 4);
      o[l] = d_lo * static_cast<float>(v) - min_lo;
    }
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] >> 4) | (((b.qh[l] >> bit_hi) & 1) << 4);
      o[l + 32] = d_hi * static_cast<float>(v) - min_hi;
    }
  }
}

inline void decode_block(const BlockQ6_K& b, float* out) {
  const float d = fp16_to_fp32(b.d);
  for (int h = 0; h < 2; ++h) {  // 128 elements: 4 rows of 32, each two 16-element sub-blocks
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* sc = b.scales + 8 * h;
    float* o = out + 128 * h;
    for (int s = 0; s < 2; ++s) {  // element 128h + 32k + 16s + i uses scale sc[2k + s]
      // ggml evaluates d * sc * q left to right: (d * sc) is the same f32 either way.
      const float d0 = d * static_cast<float>(sc[s]), d1 = d * static_cast<float>(sc[s + 2]);
      const float d2 = d * static_cast<float>(sc[s + 4]), d3 = d * static_cast<float>(sc[s + 6]);
      for (int l = 16 * s; l < 16 * s + 16; ++l) {
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        o[l] = d0 * static_cast<float>(q0);
        o[l + 32] = d1 * static_cast<float>(q1);
        o[l + 64] = d2 * static_cast<float>(q2);
        o[l + 96] = d3 * static_cast<float>(q3);
      }
    }
  }
}

// ---- encoders: num_blocks consecutive blocks from num_blocks * block elements floats ----
// Q8_0 and Q4_0 reproduce ggml's quantize_row_*_ref bit for bit for finite input (quant.cpp);
// the K-quants follow ggml's *_ref search (quant_k.cpp). Non-finite input never crashes but
// gives unspecified (finite or not) values.

void quantize_blocks(const float* src, BlockQ8_0* dst, int64_t num_blocks);
void quantize_blocks(const float* src, BlockQ4_0* dst, int64_t num_blocks);
void quantize_blocks(const float* src, BlockQ4_K* dst, int64_t num_blocks);
void quantize_blocks(const float* src, BlockQ5_K* dst, int64_t num_blocks);
void quantize_blocks(const float* src, BlockQ6_K* dst, int64_t num_blocks);

}  // namespace deltaserve::kernels
