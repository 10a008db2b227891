// Row-level conversions between f32 and the weight formats of dtype.h (ggml's exact block
// layouts, see quant_blocks.h), and the f32-activation dot product the CPU matmul is built on.
// Pure functions: no state, any thread, never block.
//
// Preconditions (checked with assert; the GGUF loader validates shapes before any call):
// n >= 0 is a multiple of dtype_traits(type).block_elements; quantised rows are 2-byte aligned.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace deltaserve::kernels {

// dst[0..n) = the values src encodes; bit-identical to ggml's dequantize_row_* built without
// FMA contraction (same f32 operations in the same order), and to the weights matmul_ref and
// dot_row multiply with.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Encodes n floats into dtype_row_bytes(type, n) bytes at dst. F16/BF16 round to nearest
// even; Q8_0/Q4_0 match ggml's quantize_row_q8_0_ref/_q4_0_ref bit for bit for finite input
// (Q4_0 with its multiply-add fused, as llama.cpp's FMA builds and gguf-py compute it; see
// quant.cpp) and tools/gguf/quants.py; Q4_K/Q5_K/Q6_K use the scale search of ggml's *_ref
// quantizers (not promised bit-exact). Non-finite input never crashes.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// sum_i w[i] * x[i] with w the decoded weight row, in a fixed order: 8 lane partial sums
// (lane = i % 8, each summed in increasing i), then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
// The result is bit-identical to the matching matmul_ref output element (accumulate=false).
float dot_row(DType type, const void* w_row, const float* x, int64_t n);

}  // namespace deltaserve::kernels
