// Row conversions and dot_row (quant.h); the Q8_0 / Q4_0 encoders. K-quant encoders live in
// quant_k.cpp.
#include "kernels/quant.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/float16.h"
#include "kernels/quant_blocks.h"
#include "kernels/row_dot.h"

namespace deltaserve::kernels {
namespace {

// Float -> integer in [lo, hi] without undefined behaviour: NaN -> 0, out of range clamps.
// In range it truncates like a C cast, so callers round first when they need rounding.
int saturate_to_int(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  if (v <= static_cast<float>(lo)) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

template <class Block>
void dequantize_blocks(const void* src, float* dst, int64_t num_blocks, int64_t elements) {
  const Block* blocks = static_cast<const Block*>(src);
  for (int64_t b = 0; b < num_blocks; ++b) decode_block(blocks[b], dst + b * elements);
}

}  // namespace

// ggml quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d) (half away from zero),
// with x / d computed as x * (1 / d) in f32.
void quantize_blocks(const float* src, BlockQ8_0* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* x = src + b * kQ8_0Elements;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) {
      dst[b].qs[j] = static_cast<int8_t>(saturate_to_int(std::round(x[j] * inv_d), -128, 127));
    }
  }
}

// ggml quantize_row_q4_0_ref: the element of largest magnitude (first one on ties) maps to
// quant 0, i.e. d = max / -8; q = min(15, trunc(x * (1 / d) + 8.5)). The multiply-add is
// fused, as in llama.cpp's usual (FMA-contracted) builds of that C code and in gguf-py's
// numpy port; an explicit std::fma gives the same bytes on every build (tools/gguf/quants.py
// matches it).
void quantize_blocks(const float* src, BlockQ4_0* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* x = src + b * kQ4_0Elements;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int lo = saturate_to_int(std::fma(x[j], inv_d, 8.5f), 0, 15);
      const int hi = saturate_to_int(std::fma(x[j + 16], inv_d, 8.5f), 0, 15);
      dst[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  assert(n >= 0 && n % dtype_traits(type).block_elements == 0);
  const int64_t num_blocks = n / dtype_traits(type).block_elements;
  switch (type) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case DType::Q8_0: return dequantize_blocks<BlockQ8_0>(src, dst, num_blocks, kQ8_0Elements);
    case DType::Q4_0: return dequantize_blocks<BlockQ4_0>(src, dst, num_blocks, kQ4_0Elements);
    case DType::Q4_K: return dequantize_blocks<BlockQ4_K>(src, dst, num_blocks, kKQuantElements);
    case DType::Q5_K: return dequantize_blocks<BlockQ5_K>(src, dst, num_blocks, kKQuantElements);
    case DType::Q6_K: return dequantize_blocks<BlockQ6_K>(src, dst, num_blocks, kKQuantElements);
  }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  assert(n >= 0 && n % dtype_traits(type).block_elements == 0);
  const int64_t num_blocks = n / dtype_traits(type).block_elements;
  switch (type) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::Q8_0: return quantize_blocks(src, static_cast<BlockQ8_0*>(dst), num_blocks);
    case DType::Q4_0: return quantize_blocks(src, static_cast<BlockQ4_0*>(dst), num_blocks);
    case DType::Q4_K: return quantize_blocks(src, static_cast<BlockQ4_K*>(dst), num_blocks);
    case DType::Q5_K: return quantize_blocks(src, static_cast<BlockQ5_K*>(dst), num_blocks);
    case DType::Q6_K: return quantize_blocks(src, static_cast<BlockQ6_K*>(dst), num_blocks);
  }
}

float dot_row(DType type, const void* w_row, const float* x, int64_t n) {
  assert(n >= 0 && n % dtype_traits(type).block_elements == 0);
  float result = 0.0f;
  detail::visit_decoder(type, [&]<class Decoder>(Decoder) {
    detail::dot_rows<Decoder, 1>(static_cast<const uint8_t*>(w_row), &x, n, &result);
  });
  return result;
}

}  // namespace deltaserve::kernels
