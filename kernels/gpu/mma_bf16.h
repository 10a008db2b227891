// bf16 tensor-core pieces shared by the Q4_0 kernels that multiply on tensor cores with exact
// products (the decode matvec, matmul_mma.cu, and the prefill tile, matmul_tile_exact.h): an f32
// activation split into three bf16 parts, Q4_0 nibbles turned into the bf16 integers q - 8, and
// the mma.sync m16n8k16 itself. CUDA device code for sm_80 and up only (DS_MMA_BF16); only for
// nvcc / hipcc translation units.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DS_MMA_BF16 1
#endif

namespace deltaserve::kernels::gpu::mma {

#if defined(DS_GPU_CUDA)
// nibbles_to_bf16x2<kSelector>'s bias bytes (bf16 0x4300 twice over) from constant memory, whose
// value ptxas does not assume, so it stays the prmt's register operand and the selector its
// literal. (Declared for the host pass too, which registers it.)
static __constant__ uint32_t kNibbleBias = 0x43434343u;
#endif

#if defined(DS_MMA_BF16)
// Two f32 -> bf16x2, rounded to nearest: `first` in the low half (the lower fragment slot).
__device__ __forceinline__ uint32_t pack_bf16x2(float first, float second) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(second), "f"(first));
  return r;
}
__device__ __forceinline__ float low_bf16(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float high_bf16(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// (first, second) = hi + mid + lo exactly: each remainder has at most 16, then 8, significant
// bits, so the subtractions are exact and the last rounding is too.
struct SplitPair {
  uint32_t hi, mid, lo;
};
__device__ __forceinline__ SplitPair split_pair(float first, float second) {
  SplitPair s;
  s.hi = pack_bf16x2(first, second);
  const float r0 = __fsub_rn(first, low_bf16(s.hi)), r1 = __fsub_rn(second, high_bf16(s.hi));
  s.mid = pack_bf16x2(r0, r1);
  s.lo = pack_bf16x2(__fsub_rn(r0, low_bf16(s.mid)), __fsub_rn(r1, high_bf16(s.mid)));
  return s;
}

// Nibble bytes n0..n3 (one per byte) -> bf16x2 (n_first - 8, n_second - 8): the byte goes into
// the mantissa of 0x4300 (bf16 128 + n, exact), then one fused bf16x2 op subtracts 136.
__device__ __forceinline__ uint32_t nibbles_to_bf16x2(uint32_t nibbles, uint32_t selector) {
  const uint32_t biased = __byte_perm(nibbles, 0x43434343u, selector);
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(biased), "r"(0x3f803f80u), "r"(0xc308c308u));
  return r;
}

// The same with the selector as the prmt's literal and the bias bytes (kNibbleBias) its register
// operand: with both as constants (above) ptxas makes the bias the immediate and re-materialises
// the selector before every prmt (8 IMAD per 16-row block in the staged matvec's SASS). Same
// values. The staged one-row kernels, the tensor matvec and the exact tile were faster with it,
// the staged 4-row kernels slower (bench/RESULTS.md), so q4_0_fragments takes either form.
template <uint32_t kSelector>
__device__ __forceinline__ uint32_t nibbles_to_bf16x2_literal(uint32_t nibbles) {
  uint32_t biased;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(biased) : "r"(nibbles), "r"(kNibbleBias), "n"(kSelector));
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(biased), "r"(0x3f803f80u), "r"(0xc308c308u));
  return r;
}

// The A fragments of one Q4_0 block for lane rows g and g + 8 from their qs words (bytes 4c ..
// 4c + 3, c = lane % 4): lo = the low nibbles (elements 4c.. of the block), hi = the high
// nibbles (16 + 4c..), in fragment order a0..a3 (row g slots 2c, 2c+1; row g+8; row g slots
// 2c+8, 2c+9; row g+8), matching activations taken as the float4s at 4c and 16 + 4c.
struct Q4_0Fragments {
  uint32_t lo[4], hi[4];
};
// kLiteralSelector: nibbles_to_bf16x2_literal's form (same values).
template <bool kLiteralSelector = true>
__device__ __forceinline__ Q4_0Fragments q4_0_fragments(uint32_t q_g, uint32_t q_g8) {
  const uint32_t lo_g = q_g & 0x0f0f0f0fu, lo_g8 = q_g8 & 0x0f0f0f0fu;
  const uint32_t hi_g = (q_g >> 4) & 0x0f0f0f0fu, hi_g8 = (q_g8 >> 4) & 0x0f0f0f0fu;
  if constexpr (kLiteralSelector) {
    return Q4_0Fragments{{nibbles_to_bf16x2_literal<0x4140u>(lo_g), nibbles_to_bf16x2_literal<0x4140u>(lo_g8),
                          nibbles_to_bf16x2_literal<0x4342u>(lo_g), nibbles_to_bf16x2_literal<0x4342u>(lo_g8)},
                         {nibbles_to_bf16x2_literal<0x4140u>(hi_g), nibbles_to_bf16x2_literal<0x4140u>(hi_g8),
                          nibbles_to_bf16x2_literal<0x4342u>(hi_g), nibbles_to_bf16x2_literal<0x4342u>(hi_g8)}};
  }
  return Q4_0Fragments{{nibbles_to_bf16x2(lo_g, 0x4140u), nibbles_to_bf16x2(lo_g8, 0x4140u),
                        nibbles_to_bf16x2(lo_g, 0x4342u), nibbles_to_bf16x2(lo_g8, 0x4342u)},
                       {nibbles_to_bf16x2(hi_g, 0x4140u), nibbles_to_bf16x2(hi_g8, 0x4140u),
                        nibbles_to_bf16x2(hi_g, 0x4342u), nibbles_to_bf16x2(hi_g8, 0x4342u)}};
}

// c += A * B, m16n8k16, bf16 inputs, f32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = A * B + 0: mma_bf16 on a zeroed accumulator (the same bits) without the zeroing, C given
// as a zero operand (measured even in the staged matvec, bench/RESULTS.md).
__device__ __forceinline__ void mma_bf16_from_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// One Q4_0 block's contribution to a 16 x 8 tile: the block's sum as two independent chains
// (low and high nibbles, smallest activation parts first, so the tensor core's latency
// overlaps), added, then one fused multiply-add by the lane rows' scales d_g, d_g8. b_lo / b_hi:
// the activation parts of the low- and high-nibble elements, [0] lo, [1] mid, [2] hi, two
// registers each.
// Every kernel that calls it gives a (weight row, activation row) element the same bits per block.
__device__ __forceinline__ void q4_0_block_mma(float (&acc)[4], const Q4_0Fragments& a, const uint32_t (&b_lo)[3][2],
                                               const uint32_t (&b_hi)[3][2], float d_g, float d_g8) {
  float s_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_bf16(s_lo, a.lo, b_lo[0][0], b_lo[0][1]);
  mma_bf16(s_hi, a.hi, b_hi[0][0], b_hi[0][1]);
  mma_bf16(s_lo, a.lo, b_lo[1][0], b_lo[1][1]);
  mma_bf16(s_hi, a.hi, b_hi[1][0], b_hi[1][1]);
  mma_bf16(s_lo, a.lo, b_lo[2][0], b_lo[2][1]);
  mma_bf16(s_hi, a.hi, b_hi[2][0], b_hi[2][1]);
  acc[0] = fmaf(d_g, s_lo[0] + s_hi[0], acc[0]);
  acc[1] = fmaf(d_g, s_lo[1] + s_hi[1], acc[1]);
  acc[2] = fmaf(d_g8, s_lo[2] + s_hi[2], acc[2]);
  acc[3] = fmaf(d_g8, s_lo[3] + s_hi[3], acc[3]);
}
#endif

}  // namespace deltaserve::kernels::gpu::mma
