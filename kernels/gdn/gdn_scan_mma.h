// Internal to gdn_prefill.cu: the chunk pass's three products on the tensor cores (the scan
// kernel's kTensor form). One block, 8 warps, holds S [DK][32] (a value head's 32 state columns)
// in shared memory; per chunk of 64 rows:
//   D = U - W S     [64][32]   warp w: rows 16 (w / 2), columns 16 (w % 2) .. + 16
//   O = Qe S + P D  [64][32]   the same tile
//   S = e^Gamma_C S + Kd^T D   [DK][32]   tiles of 16 x 8, warp w takes tiles w, w + 8, ...
// with m16n8k16 bf16 mma and f32 accumulation. Each f32 operand x is split as hi = bf16(x),
// lo = bf16(x - hi) (|x - hi - lo| <= 2^-17 |x|), and a product as lo*hi + hi*lo + hi*hi (the
// dropped lo*lo is below 2^-16 of it): every product carries a relative error near 2^-16, every
// sum is f32 (the tensor core's own), so outputs and states agree with the FMA form to a relative
// ~1e-5 (gpu_kernel_tests holds both to the same CPU reference, NMSE 1e-8).
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16): lane = 4 g + t; A a0 (row g, cols 2t, 2t+1),
// a1 (row g + 8), a2 (row g, cols 2t + 8, +9), a3 (row g + 8, cols 2t + 8, +9); B b0 (rows 2t,
// 2t+1, col g), b1 (rows 2t + 8, +9, col g); C c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g + 8).
// Every result is a fixed-order chain per element (no atomics): batch-invariant like the FMA form.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/mma_bf16.h"

namespace deltaserve::kernels::detail {

#if defined(DS_MMA_BF16)
struct SplitA {
  uint32_t hi[4], lo[4];
};
struct SplitB {
  uint32_t hi[2], lo[2];
};

__device__ __forceinline__ void split2(float first, float second, uint32_t& hi, uint32_t& lo) {
  hi = gpu::mma::pack_bf16x2(first, second);
  lo = gpu::mma::pack_bf16x2(__fsub_rn(first, gpu::mma::low_bf16(hi)), __fsub_rn(second, gpu::mma::high_bf16(hi)));
}

// c += A B as lo*hi + hi*lo + hi*hi (the small terms first).
__device__ __forceinline__ void mma_split(float (&c)[4], const SplitA& a, const SplitB& b) {
  gpu::mma::mma_bf16(c, a.lo, b.hi[0], b.hi[1]);
  gpu::mma::mma_bf16(c, a.hi, b.lo[0], b.lo[1]);
  gpu::mma::mma_bf16(c, a.hi, b.hi[0], b.hi[1]);
}

// A fragment of the 16 x 16 tile at (m0, k0) of a row-major matrix (element (m, k) at x[m * ld + k]).
__device__ __forceinline__ SplitA load_a_rows(const float* x, int ld, int m0, int k0) {
  const int g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const float* r0 = x + (m0 + g) * ld + k0 + 2 * t;
  const float* r8 = r0 + 8 * ld;
  SplitA a;
  split2(r0[0], r0[1], a.hi[0], a.lo[0]);
  split2(r8[0], r8[1], a.hi[1], a.lo[1]);
  split2(r0[8], r0[9], a.hi[2], a.lo[2]);
  split2(r8[8], r8[9], a.hi[3], a.lo[3]);
  return a;
}

// A fragment of the transpose: element (m, k) at x[k * ld + m].
__device__ __forceinline__ SplitA load_a_transposed(const float* x, int ld, int m0, int k0) {
  const int g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const float* k_lo = x + (k0 + 2 * t) * ld + m0 + g;  // k = k0 + 2t, m = m0 + g
  SplitA a;
  split2(k_lo[0], k_lo[ld], a.hi[0], a.lo[0]);
  split2(k_lo[8], k_lo[ld + 8], a.hi[1], a.lo[1]);
  split2(k_lo[8 * ld], k_lo[9 * ld], a.hi[2], a.lo[2]);
  split2(k_lo[8 * ld + 8], k_lo[9 * ld + 8], a.hi[3], a.lo[3]);
  return a;
}

// B fragment of the 16 x 8 tile at (k0, n0) of a row-major matrix (element (k, n) at x[k * ld + n]).
__device__ __forceinline__ SplitB load_b(const float* x, int ld, int k0, int n0) {
  const int g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const float* p = x + (k0 + 2 * t) * ld + n0 + g;
  SplitB b;
  split2(p[0], p[ld], b.hi[0], b.lo[0]);
  split2(p[8 * ld], p[9 * ld], b.hi[1], b.lo[1]);
  return b;
}
#endif

// D = U - W S into d_s [64][32] (u: row r, column c at u[r * u_stride + c], rows >= n read as 0)
// and o = Qe S for the warp's tile (o[nt]: C fragment of columns 16 (w % 2) + 8 nt).
template <int DK>
__device__ __forceinline__ void scan_mma_d_and_qs(const float* w_s, const float* q_s, int row_stride, const float* s_s,
                                                  float* d_s, const float* u, int64_t u_stride, int64_t n,
                                                  float (&o)[2][4]) {
#if defined(DS_MMA_BF16)
  const int warp = gpu::warp_id(), g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const int m0 = 16 * (warp / 2), n0 = 16 * (warp % 2);
  float d[2][4] = {};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;
  }
#pragma unroll 2
  for (int k0 = 0; k0 < DK; k0 += 16) {
    const SplitA wa = load_a_rows(w_s, row_stride, m0, k0), qa = load_a_rows(q_s, row_stride, m0, k0);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const SplitB sb = load_b(s_s, 32, k0, n0 + 8 * nt);
      mma_split(d[nt], wa, sb);
      mma_split(o[nt], qa, sb);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + g + 8 * (e / 2), c = n0 + 8 * nt + 2 * t + e % 2;
      const float uv = r < n ? u[r * u_stride + c] : 0.0f;
      d_s[r * 32 + c] = uv - d[nt][e];
    }
  }
#else
  // never launched there: gdn_prefill_gpu takes this form only where the device has bf16 mma
  (void)w_s, (void)q_s, (void)row_stride, (void)s_s, (void)d_s, (void)u, (void)u_stride, (void)n;
  for (int nt = 0; nt < 2; ++nt)
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;
#endif
}

// O = o + P D for the warp's tile (d_s complete), stored for rows < n (out: row r, column c at
// out[r * out_stride + c]).
__device__ __forceinline__ void scan_mma_out(const float* p_s, int p_stride, const float* d_s, float (&o)[2][4], float* out,
                                             int64_t out_stride, int64_t n) {
#if defined(DS_MMA_BF16)
  const int warp = gpu::warp_id(), g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const int m0 = 16 * (warp / 2), n0 = 16 * (warp % 2);
#pragma unroll
  for (int k0 = 0; k0 < 64; k0 += 16) {
    const SplitA pa = load_a_rows(p_s, p_stride, m0, k0);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) mma_split(o[nt], pa, load_b(d_s, 32, k0, n0 + 8 * nt));
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + g + 8 * (e / 2), c = n0 + 8 * nt + 2 * t + e % 2;
      if (r < n) out[r * out_stride + c] = o[nt][e];
    }
  }
#else
  (void)p_s, (void)p_stride, (void)d_s, (void)o, (void)out, (void)out_stride, (void)n;
#endif
}

// S = decay_c S + Kd^T D over the warp's 16 x 8 tiles of s_s [DK][32] (kd_s: [64][row_stride],
// row r = e^(Gamma_C - Gamma_r) k_r; d_s complete; every read of s_s by the D / O pass done).
// round_state: the state as a bf16 store would leave it (StateT bf16), after every chunk.
template <int DK>
__device__ __forceinline__ void scan_mma_state(const float* kd_s, int row_stride, const float* d_s, float* s_s,
                                               float decay_c, bool round_state) {
#if defined(DS_MMA_BF16)
  const int g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  constexpr int kTiles = (DK / 16) * 4;
  for (int tile = gpu::warp_id(); tile < kTiles; tile += 8) {
    const int i0 = 16 * (tile / 4), c0 = 8 * (tile % 4);
    float acc[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] = decay_c * s_s[(i0 + g + 8 * (e / 2)) * 32 + c0 + 2 * t + e % 2];
#pragma unroll
    for (int k0 = 0; k0 < 64; k0 += 16) mma_split(acc, load_a_transposed(kd_s, row_stride, i0, k0), load_b(d_s, 32, k0, c0));
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = round_state ? gpu::bf16_bits_to_float(gpu::float_to_bf16_bits(acc[e])) : acc[e];
      s_s[(i0 + g + 8 * (e / 2)) * 32 + c0 + 2 * t + e % 2] = v;
    }
  }
#else
  (void)kd_s, (void)row_stride, (void)d_s, (void)s_s, (void)decay_c, (void)round_state;
#endif
}

}  // namespace deltaserve::kernels::detail
