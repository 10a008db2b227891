// Device-side decoders of the weight layouts (quant_blocks.h), shared by the matmul and the
// embedding kernels. A row is walked in 8-element chunks: decode(row, c, w, x0, x1) returns
// the 8 values of chunk c, w[0..4) for elements x0..x0+3 and w[4..8) for x1..x1+3. The values
// are bit-identical to the CPU decoders (same f32 operations, no fused multiply-add), so the
// embedding lookup matches embedding_lookup_ref exactly. Alignment: F32/F16/BF16 rows 16
// bytes, quantised rows 2 bytes. Only for nvcc / hipcc translation units.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels::gpu {

struct DecodeF32 {
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const float4* p = reinterpret_cast<const float4*>(row) + 2 * c;
    const float4 a = p[0], b = p[1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    x0 = 8 * c;
    x1 = x0 + 4;
  }
};

template <bool kBf16>
struct DecodeHalf {
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const uint4 v = reinterpret_cast<const uint4*>(row)[c];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = static_cast<uint16_t>(words[i] & 0xffffu);
      const uint16_t hi = static_cast<uint16_t>(words[i] >> 16);
      w[2 * i] = kBf16 ? bf16_bits_to_float(lo) : f16_bits_to_float(lo);
      w[2 * i + 1] = kBf16 ? bf16_bits_to_float(hi) : f16_bits_to_float(hi);
    }
    x0 = 8 * c;
    x1 = x0 + 4;
  }
};

// Q8_0 (34-byte blocks of 32): chunk = quarter p of block b, elements 32b + 8p .. + 7.
struct DecodeQ8_0 {
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const int64_t b = c >> 2;
    const int p = static_cast<int>(c & 3);
    const uint8_t* block = row + 34 * b;
    const float d = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(block));
    const uint32_t q0 = load_u32_align2(block + 2 + 8 * p);
    const uint32_t q1 = load_u32_align2(block + 6 + 8 * p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<float>(static_cast<int8_t>((q0 >> (8 * i)) & 0xffu)) * d;
      w[4 + i] = static_cast<float>(static_cast<int8_t>((q1 >> (8 * i)) & 0xffu)) * d;
    }
    x0 = 32 * b + 8 * p;
    x1 = x0 + 4;
  }
};

// Q4_0 (18-byte blocks of 32): chunk = qs bytes 4p .. 4p+3 of block b, whose low nibbles are
// elements 4p.. and high nibbles 16 + 4p.. .
struct DecodeQ4_0 {
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const int64_t b = c >> 2;
    const int p = static_cast<int>(c & 3);
    const uint8_t* block = row + 18 * b;
    const float d = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(block));
    const uint32_t q = load_u32_align2(block + 2 + 4 * p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = (q >> (8 * i)) & 0xffu;
      w[i] = static_cast<float>(static_cast<int>(byte & 15u) - 8) * d;
      w[4 + i] = static_cast<float>(static_cast<int>(byte >> 4) - 8) * d;
    }
    x0 = 32 * b + 4 * p;
    x1 = x0 + 16;
  }
};

// Q4_K (144-byte super-blocks of 256): chunk cc = 8g + quad of super-block b reads qs bytes
// 32g + 4quad .. +3: low nibbles are elements 64g + 4quad.. (sub-block 2g), high nibbles
// 64g + 32 + 4quad.. (sub-block 2g + 1). value = (d * sc) * q - (dmin * m), unfused like the
// CPU decoder.
struct DecodeQ4_K {
  __device__ static void scale_min(int s, const uint8_t* scales, int& sc, int& m) {
    if (s < 4) {
      sc = scales[s] & 63;
      m = scales[s + 4] & 63;
    } else {
      sc = (scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4);
      m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
    }
  }
  // The scales of sub-blocks 2g (lo) and 2g + 1 (hi) of a super-block whose header (d, dmin,
  // 12 bytes of packed 6-bit scales and mins) opens `block`: d * sc and dmin * m, unfused.
  // Q5_K's header is the same.
  __device__ static void sub_block_scales(const uint8_t* block, int g, float& d_lo, float& min_lo, float& d_hi,
                                          float& min_hi) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(block);
    const float d = f16_bits_to_float(h[0]);
    const float dmin = f16_bits_to_float(h[1]);
    int sc_lo, m_lo, sc_hi, m_hi;
    scale_min(2 * g, block + 4, sc_lo, m_lo);
    scale_min(2 * g + 1, block + 4, sc_hi, m_hi);
    d_lo = __fmul_rn(d, static_cast<float>(sc_lo));
    min_lo = __fmul_rn(dmin, static_cast<float>(m_lo));
    d_hi = __fmul_rn(d, static_cast<float>(sc_hi));
    min_hi = __fmul_rn(dmin, static_cast<float>(m_hi));
  }
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const int64_t b = c >> 5;
    const int cc = static_cast<int>(c & 31);
    const int g = cc >> 3, quad = cc & 7;
    const uint8_t* block = row + 144 * b;
    float d_lo, min_lo, d_hi, min_hi;
    sub_block_scales(block, g, d_lo, min_lo, d_hi, min_hi);
    const uint32_t q = load_u32_align2(block + 16 + 32 * g + 4 * quad);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = (q >> (8 * i)) & 0xffu;
      w[i] = __fsub_rn(__fmul_rn(d_lo, static_cast<float>(byte & 15u)), min_lo);
      w[4 + i] = __fsub_rn(__fmul_rn(d_hi, static_cast<float>(byte >> 4)), min_hi);
    }
    x0 = 256 * b + 64 * g + 4 * quad;
    x1 = x0 + 32;
  }
};

// Q5_K (176-byte super-blocks of 256): Q4_K's chunk layout with a fifth bit per element.
// Chunk cc = 8g + quad of super-block b reads qs bytes 32g + 4quad .. +3 (at byte 48) and qh
// bytes 4quad .. +3 (at byte 16): element 64g + 4quad + i is the low nibble of qs byte i with
// bit 2g of qh byte i on top (sub-block 2g), element 64g + 32 + 4quad + i the high nibble with
// bit 2g + 1 (sub-block 2g + 1). value = (d * sc) * q - (dmin * m), unfused like the CPU
// decoder.
struct DecodeQ5_K {
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const int64_t b = c >> 5;
    const int cc = static_cast<int>(c & 31);
    const int g = cc >> 3, quad = cc & 7;
    const uint8_t* block = row + 176 * b;
    float d_lo, min_lo, d_hi, min_hi;
    DecodeQ4_K::sub_block_scales(block, g, d_lo, min_lo, d_hi, min_hi);
    const uint32_t qh = load_u32_align2(block + 16 + 4 * quad);
    const uint32_t q = load_u32_align2(block + 48 + 32 * g + 4 * quad);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = (q >> (8 * i)) & 0xffu, hb = (qh >> (8 * i)) & 0xffu;
      const uint32_t q_lo = (byte & 15u) | (((hb >> (2 * g)) & 1u) << 4);
      const uint32_t q_hi = (byte >> 4) | (((hb >> (2 * g + 1)) & 1u) << 4);
      w[i] = __fsub_rn(__fmul_rn(d_lo, static_cast<float>(q_lo)), min_lo);
      w[4 + i] = __fsub_rn(__fmul_rn(d_hi, static_cast<float>(q_hi)), min_hi);
    }
    x0 = 256 * b + 64 * g + 4 * quad;
    x1 = x0 + 32;
  }
};

// Q6_K (210-byte super-blocks of 256): chunk cc = 16h + 8kp + quad reads ql bytes
// 64h + 32kp + 4quad.. and qh bytes 32h + 4quad..: low nibbles give elements
// 128h + 32kp + 4quad.. (qh bits 2kp), high nibbles 128h + 32(kp + 2) + 4quad.. (bits 2kp + 4).
struct DecodeQ6_K {
  __device__ static void decode(const uint8_t* row, int64_t c, float w[8], int64_t& x0, int64_t& x1) {
    const int64_t b = c >> 5;
    const int cc = static_cast<int>(c & 31);
    const int h = cc >> 4, kp = (cc >> 3) & 1, quad = cc & 7;
    const uint8_t* block = row + 210 * b;
    const float d = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(block + 208));
    const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192) + 8 * h + (quad >> 2);
    const float d_lo = __fmul_rn(d, static_cast<float>(sc[2 * kp]));
    const float d_hi = __fmul_rn(d, static_cast<float>(sc[2 * kp + 4]));
    const uint32_t ql = load_u32_align2(block + 64 * h + 32 * kp + 4 * quad);
    const uint32_t qh = load_u32_align2(block + 128 + 32 * h + 4 * quad);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t l = (ql >> (8 * i)) & 0xffu, hb = (qh >> (8 * i)) & 0xffu;
      const int q_lo = static_cast<int>((l & 15u) | (((hb >> (2 * kp)) & 3u) << 4)) - 32;
      const int q_hi = static_cast<int>((l >> 4) | (((hb >> (2 * kp + 4)) & 3u) << 4)) - 32;
      w[i] = __fmul_rn(d_lo, static_cast<float>(q_lo));
      w[4 + i] = __fmul_rn(d_hi, static_cast<float>(q_hi));
    }
    x0 = 256 * b + 128 * h + 32 * kp + 4 * quad;
    x1 = x0 + 64;
  }
};

}  // namespace deltaserve::kernels::gpu
