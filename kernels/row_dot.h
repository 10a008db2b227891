// Internal to kernels/: the one dot-product kernel behind dot_row and matmul_ref.
//
// A weight row is decoded one chunk at a time (one block, or 256 elements of a float type)
// into a small stack buffer holding exactly dequantize_row's values, then multiplied against
// R activation rows at once, so each chunk is decoded once per R rows. Every row keeps its own
// 8 lane accumulators (lane = element index % 8, elements in increasing order) and the lanes
// are reduced in a fixed tree, so a row's result does not depend on R, on the other rows, or
// on vectorisation (the kernels target is built with -ffp-contract=off: no fused multiply-add).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/float16.h"
#include "kernels/quant_blocks.h"

namespace deltaserve::kernels::detail {

inline constexpr int kLanes = 8;

// Decoders: decode(row, begin, len, buf) returns len floats for elements [begin, begin + len)
// of the row, either in buf (kChunk floats) or in place. begin is a multiple of kChunk and
// len == kChunk except for the last chunk of a float-typed row.
struct DecodeF32 {
  static constexpr int64_t kChunk = 256;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t, float*) {
    return reinterpret_cast<const float*>(row) + begin;
  }
};

struct DecodeF16 {
  static constexpr int64_t kChunk = 256;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t len, float* buf) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + begin;
    for (int64_t i = 0; i < len; ++i) buf[i] = fp16_to_fp32(src[i]);
    return buf;
  }
};

struct DecodeBF16 {
  static constexpr int64_t kChunk = 256;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t len, float* buf) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + begin;
    for (int64_t i = 0; i < len; ++i) buf[i] = bf16_to_fp32(src[i]);
    return buf;
  }
};

template <class Block, int64_t kElements>
struct DecodeBlocks {
  static constexpr int64_t kChunk = kElements;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t, float* buf) {
    decode_block(reinterpret_cast<const Block*>(row)[begin / kElements], buf);
    return buf;
  }
};

using DecodeQ8_0 = DecodeBlocks<BlockQ8_0, kQ8_0Elements>;
using DecodeQ4_0 = DecodeBlocks<BlockQ4_0, kQ4_0Elements>;
using DecodeQ4_K = DecodeBlocks<BlockQ4_K, kKQuantElements>;
using DecodeQ5_K = DecodeBlocks<BlockQ5_K, kKQuantElements>;
using DecodeQ6_K = DecodeBlocks<BlockQ6_K, kKQuantElements>;

// Calls fn(Decoder{}) with the decoder of type (one switch per call, outside the hot loops).
template <class Fn>
inline void visit_decoder(DType type, Fn&& fn) {
  switch (type) {
    case DType::F32: fn(DecodeF32{}); return;
    case DType::F16: fn(DecodeF16{}); return;
    case DType::BF16: fn(DecodeBF16{}); return;
    case DType::Q8_0: fn(DecodeQ8_0{}); return;
    case DType::Q4_0: fn(DecodeQ4_0{}); return;
    case DType::Q4_K: fn(DecodeQ4_K{}); return;
    case DType::Q5_K: fn(DecodeQ5_K{}); return;
    case DType::Q6_K: fn(DecodeQ6_K{}); return;
  }
}

// acc[r][l] += w[i] * x[r][begin + i] for i in [0, len), lane l = i % kLanes.
template <int R>
inline void accumulate_chunk(const float* w, const float* const* xs, int64_t begin, int64_t len,
                             float (&acc)[R][kLanes]) {
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int r = 0; r < R; ++r) {
      const float* x = xs[r] + begin + i;
      for (int l = 0; l < kLanes; ++l) acc[r][l] += w[i + l] * x[l];
    }
  }
  for (; i < len; ++i) {  // tail of a float-typed row whose length is not a multiple of 8
    for (int r = 0; r < R; ++r) acc[r][i % kLanes] += w[i] * xs[r][begin + i];
  }
}

inline float reduce_lanes(const float (&a)[kLanes]) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// out[r] = dot(decoded w_row, xs[r]) for r < R, each over n elements.
template <class Decoder, int R>
inline void dot_rows(const uint8_t* w_row, const float* const* xs, int64_t n, float* out) {
  float acc[R][kLanes] = {};
  alignas(64) float buf[Decoder::kChunk];
  for (int64_t begin = 0; begin < n; begin += Decoder::kChunk) {
    const int64_t len = std::min<int64_t>(Decoder::kChunk, n - begin);
    accumulate_chunk<R>(Decoder::decode(w_row, begin, len, buf), xs, begin, len, acc);
  }
  for (int r = 0; r < R; ++r) out[r] = reduce_lanes(acc[r]);
}

}  // namespace deltaserve::kernels::detail
