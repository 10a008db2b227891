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
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/float16.h"
#include "kernels/quant_blocks.h"

namespace deltaserve::kernels::detail {

inline constexpr int kLanes = 8;

// Decoders: decode(row, begin, len, buf) returns len floats for elements [begin, begin + len)
// of the row, either in buf (kChunk floats) or in place. begin is a multiple of kChunk and
// len == kChunk except for the last chunk of a float-typed row (kWholeChunks == false).
struct DecodeF32 {
  static constexpr int64_t kChunk = 256;
  static constexpr bool kWholeChunks = false;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t, float*) {
    return reinterpret_cast<const float*>(row) + begin;
  }
};

struct DecodeF16 {
  static constexpr int64_t kChunk = 256;
  static constexpr bool kWholeChunks = false;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t len, float* buf) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + begin;
    for (int64_t i = 0; i < len; ++i) buf[i] = fp16_to_fp32(src[i]);
    return buf;
  }
};

struct DecodeBF16 {
  static constexpr int64_t kChunk = 256;
  static constexpr bool kWholeChunks = false;
  static const float* decode(const uint8_t* row, int64_t begin, int64_t len, float* buf) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + begin;
    for (int64_t i = 0; i < len; ++i) buf[i] = bf16_to_fp32(src[i]);
    return buf;
  }
};

template <class Block, int64_t kElements>
struct DecodeBlocks {
  static constexpr int64_t kChunk = kElements;
  static constexpr bool kWholeChunks = true;
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

// Eight lanes as two 4-float vectors (GCC/Clang vector extension: element-wise IEEE ops, so
// identical to the scalar loop; plain loops did not keep multi-row accumulators in
// registers). 16-byte vectors are SSE2 / NEON width: no -march needed, no ABI change.
using Float4 = float __attribute__((vector_size(16)));
struct Lanes {
  Float4 lo;  // lanes 0..3
  Float4 hi;  // lanes 4..7
};

inline Float4 load_float4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// acc[r] lane l += w[i] * x[r][begin + i] for i in [0, len), l = i % kLanes, increasing i;
// len is a multiple of kLanes.
template <int R>
inline void accumulate_chunk(const float* w, const float* const* xs, int64_t begin, int64_t len,
                             Lanes (&acc)[R]) {
  for (int64_t i = 0; i < len; i += kLanes) {
    const Float4 w_lo = load_float4(w + i), w_hi = load_float4(w + i + 4);
    for (int r = 0; r < R; ++r) {
      const float* x = xs[r] + begin + i;
      acc[r].lo += w_lo * load_float4(x);
      acc[r].hi += w_hi * load_float4(x + 4);
    }
  }
}

// The same for i in [tail_begin, len), tail_begin a multiple of kLanes, len - tail_begin < 8:
// the end of a float-typed row whose length is not a multiple of 8.
template <int R>
inline void accumulate_tail(const float* w, const float* const* xs, int64_t begin,
                            int64_t tail_begin, int64_t len, Lanes (&acc)[R]) {
  for (int64_t i = tail_begin; i < len; ++i) {
    const int lane = static_cast<int>(i - tail_begin);
    for (int r = 0; r < R; ++r) {
      const float p = w[i] * xs[r][begin + i];
      if (lane < 4) {
        acc[r].lo[lane] += p;
      } else {
        acc[r].hi[lane - 4] += p;
      }
    }
  }
}

inline float reduce_lanes(const Lanes& a) {
  return ((a.lo[0] + a.lo[1]) + (a.lo[2] + a.lo[3])) + ((a.hi[0] + a.hi[1]) + (a.hi[2] + a.hi[3]));
}

// Accumulates elements [begin, end) of the row into acc, chunk by chunk; begin is a multiple
// of Decoder::kChunk. Splitting a row into consecutive ranges gives the same acc as one call.
template <class Decoder, int R>
inline void accumulate_range(const uint8_t* w_row, const float* const* xs, int64_t begin,
                             int64_t end, Lanes (&acc)[R]) {
  alignas(64) float buf[Decoder::kChunk];
  for (int64_t chunk = begin; chunk < end; chunk += Decoder::kChunk) {
    const int64_t len =
        Decoder::kWholeChunks ? Decoder::kChunk : std::min<int64_t>(Decoder::kChunk, end - chunk);
    const float* w = Decoder::decode(w_row, chunk, len, buf);
    const int64_t full = len - len % kLanes;
    accumulate_chunk<R>(w, xs, chunk, full, acc);
    if constexpr (!Decoder::kWholeChunks) {
      if (full < len) accumulate_tail<R>(w, xs, chunk, full, len, acc);
    }
  }
}

// out[r] = dot(decoded w_row, xs[r]) for r < R, each over n elements.
template <class Decoder, int R>
inline void dot_rows(const uint8_t* w_row, const float* const* xs, int64_t n, float* out) {
  Lanes acc[R];
  for (int r = 0; r < R; ++r) acc[r] = Lanes{Float4{}, Float4{}};
  accumulate_range<Decoder, R>(w_row, xs, 0, n, acc);
  for (int r = 0; r < R; ++r) out[r] = reduce_lanes(acc[r]);
}

}  // namespace deltaserve::kernels::detail
