// The tile product of matmul_tile.h (tile_run's contract: C[r][c] = dot(x row r, W row c) for BM
// activation rows x kCols weight rows, left in shared memory for the caller's epilogue, here
// with row stride kCols + 4) for Q4_0 weights on bf16 tensor cores with exact products:
// MatmulMath::kTensorExact. kCols is 128 (the callers' tiles): twice tile_run's 64, so each
// staged and split activation window serves twice the weight rows (the 64-column tile ran no
// faster than the TF32 tile; bench/RESULTS.md).
//
// Arithmetic (mma_bf16.h, the same per-block steps as the tensor-core decode matvec): a weight
// enters as the integer q - 8 (exact in bf16), an activation as three bf16 parts hi + mid + lo
// (exactly x), so every product is exact; per 32-element block the tensor core sums the low- and
// high-nibble halves (parts lo, mid, hi in turn), the two sums are added and one fused
// multiply-add by the block's scale adds them to the element's f32 accumulator; blocks go in
// ascending k. The steps of an element depend on its x row, its W row and num_in only, not on
// BM, the tile or its position there, so every BM gives the same bits (the expert kernel's pair
// tiles of 8 and 16 equal matmul_prefill_gpu's 32-row tiles) and a row alone equals it in any batch.
// Only the rounding of the sums differs from the f32 tile (NMSE ~1e-13 against matmul_ref).
//
// Layout: 8 warps; warp w takes kWm tiles of 16 weight rows (mma M) x kWn tiles of 8 activation
// rows (mma N). Per 128-element window: the raw Q4_0 bytes of the kCols weight rows (tile_stage_raw,
// cp.async, double-buffered), and the activations, loaded into registers one window ahead,
// split into the three bf16 parts and stored as three planes [BM][kExactPlaneStride]. A lane
// reads its A fragments as qs bytes 4c..4c+3 of rows g and g + 8 (c = lane % 4), and its B
// fragments as 4 consecutive bf16 of a plane at elements 4c.. and 16 + 4c.. of a block (the
// element permutation of matmul_mma.cu: A and B agree, and a dot product does not care which
// terms pair up). CUDA sm_80 and up; elsewhere the caller runs the f32 tile instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"
#include "kernels/matmul/matmul_tile.h"
#include "kernels/gpu/mma_bf16.h"

namespace deltaserve::kernels::gpu {

// Weight rows of the callers' exact tiles (dense and expert): twice tile_run's 64 (see above).
inline constexpr int kExactTileCols = 128;

// bf16 per staged activation row of one part: 128 + 16, 288 bytes, so the 8-byte fragment loads
// of a half warp (rows g = 0..3, c = 0..3) fall in distinct banks.
inline constexpr int kExactPlaneStride = kTileWindow + 16;

// The staged activations of a window: kXUnits float4s per thread, three planes of BM rows.
template <int BM>
struct ExactPlanes {
  static constexpr int kXUnits = BM * (kTileWindow / 4) / kTileThreads;
  static_assert(kXUnits >= 1, "a float4 per thread at least");
  static constexpr size_t kPlane = sizeof(uint16_t) * BM * kExactPlaneStride;
};

template <int BM, int kCols>
struct ExactTile {
  static_assert((BM == 8 || BM == 16 || BM == 32 || BM == 64) && (kCols == 64 || kCols == 128), "BM: 8 to 64; kCols: 64 or 128");
  // 16-row weight tiles and 8-row activation tiles per warp: (kCols / 16) x (BM / 8) tiles over
  // 8 warps, at most 2 x 2 each (registers: the activations of the next window stay in them).
  static constexpr int kTilesPerWarp = (kCols / 16) * (BM / 8) / 8;
  static_assert(kTilesPerWarp >= 1 && kTilesPerWarp <= 4, "2 x 2 tiles per warp at most");
  static constexpr int kWm = kTilesPerWarp == 1 ? 1 : 2;
  static constexpr int kWn = kTilesPerWarp / kWm;
  static constexpr int kCStride = kCols + 4;           // floats per row of the result tile
  static constexpr int kMGroups = (kCols / 16) / kWm;  // warps along the weight rows
  static_assert(kMGroups * ((BM / 8) / kWn) == kTileThreads / 32, "the warps cover the tile");
  static constexpr size_t kPlane = ExactPlanes<BM>::kPlane;
  static constexpr size_t kPlanes = 3 * kPlane;  // lo, mid, hi
  static constexpr size_t kRaw = size_t{2} * kCols * TileRaw<DecodeQ4_0>::kRowStride;
  static constexpr size_t kTables = sizeof(void*) * (BM + kCols);
  static constexpr size_t kBytes = kPlanes + kRaw + kTables;
  static_assert(sizeof(float) * BM * kCStride <= kPlanes, "the C tile reuses the planes");
};

template <int BM, int kCols>
constexpr size_t tile_exact_smem_bytes() {
  return ExactTile<BM, kCols>::kBytes;
}

#if defined(DS_MMA_BF16)
// Two bytes at a 2-byte-aligned shared-memory address, as a 32-bit word's halves.
__device__ __forceinline__ uint32_t smem_u32_align2(const unsigned char* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}

// The activations of window (k0, kw) this thread stages: kXUnits float4s, zeros for padding
// rows and k >= kw.
template <int BM>
__device__ __forceinline__ void exact_load_x(const float* const* x_tab, int64_t k0, int kw, float4 (&v)[ExactPlanes<BM>::kXUnits]) {
#pragma unroll
  for (int i = 0; i < ExactPlanes<BM>::kXUnits; ++i) {
    const int u = static_cast<int>(threadIdx.x) + kTileThreads * i;
    const int r = u / (kTileWindow / 4), j = u % (kTileWindow / 4);
    const float* xr = x_tab[r];
    v[i] = xr != nullptr && 4 * j < kw ? *reinterpret_cast<const float4*>(xr + k0 + 4 * j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Raw-byte staging when every weight row of the tile starts 16-byte aligned (a Q4_0 row of a
// multiple of 256 inputs: all of the 35B-A3B's and 27B's matrices): each row's span then has
// the same offset in its first 16-byte unit, so thread t always copies units t / kCols,
// t / kCols + kStep, ... of row t % kCols, with its row's address and end found once per tile
// instead of per unit (measured: tile_stage_raw's per-unit arithmetic was 30% of the decode
// expert tile's instructions, and that kernel is issue-bound). The same bytes land in the same
// places as tile_stage_raw's, under the same end rule: a unit that would pass its matrix's end
// is copied by 2-byte loads.
template <int kCols>
struct ExactRowStager {
  static constexpr int kStep = kTileThreads / kCols;  // threads per row
  const uint8_t* row;                                  // this thread's weight row
  const uint8_t* end;                                  // where its matrix's bytes end
  int stage_off;                                       // the row's offset in a stage
  int first_unit;                                      // this thread's first unit of the row

  __device__ __forceinline__ ExactRowStager(const uint8_t* const* w_tab, const TileWeightEnds& ends) {
    const int tid = static_cast<int>(threadIdx.x), n = tid % kCols;
    row = w_tab[n];
    end = n < ends.second_first_col ? ends.first : ends.second;
    stage_off = n * TileRaw<DecodeQ4_0>::kRowStride;
    first_unit = tid / kCols;
  }

  __device__ __forceinline__ void stage(unsigned char* stage, int64_t k0, int kw) const {
    const TileSpan sp = tile_span<DecodeQ4_0>(k0, kw);
    const int pad = static_cast<int>(sp.byte_off & 15);
    const int len = pad + sp.num_bytes;
    const uint8_t* src = row + (sp.byte_off - pad);
    unsigned char* dst = stage + stage_off;
    for (int j = first_unit; 16 * j < len; j += kStep) {
      const uint8_t* unit = src + 16 * j;
      tile_copy_unit(dst + 16 * j, unit, max(pad - 16 * j, 0), min(len - 16 * j, 16), unit + 16 <= end);
    }
  }
};

// Those float4s split into (lo, mid, hi) bf16 parts, into the three planes.
template <int BM>
__device__ __forceinline__ void exact_store_planes(const float4 (&v)[ExactPlanes<BM>::kXUnits], unsigned char* planes) {
#pragma unroll
  for (int i = 0; i < ExactPlanes<BM>::kXUnits; ++i) {
    const int u = static_cast<int>(threadIdx.x) + kTileThreads * i;
    const int r = u / (kTileWindow / 4), j = u % (kTileWindow / 4);
    const mma::SplitPair a = mma::split_pair(v[i].x, v[i].y), b = mma::split_pair(v[i].z, v[i].w);
    const size_t at = sizeof(uint16_t) * (static_cast<size_t>(r) * kExactPlaneStride + 4 * j);
    *reinterpret_cast<uint2*>(planes + at) = make_uint2(a.lo, b.lo);
    *reinterpret_cast<uint2*>(planes + ExactPlanes<BM>::kPlane + at) = make_uint2(a.mid, b.mid);
    *reinterpret_cast<uint2*>(planes + 2 * ExactPlanes<BM>::kPlane + at) = make_uint2(a.hi, b.hi);
  }
}
#endif

// tile_run's contract for D = DecodeQ4_0 (matmul_tile.h) and kCols weight rows, on tensor cores
// with exact products; the C tile's row stride is ExactTile<BM, kCols>::kCStride.
template <int BM, int kCols, class XRowOf, class WRowOf>
__device__ __forceinline__ void tile_run_exact(XRowOf x_row_of, WRowOf w_row_of, int64_t num_in, int num_live_rows,
                                               bool w_aligned16, const TileWeightEnds& ends, unsigned char* smem) {
#if defined(DS_MMA_BF16)
  using L = ExactTile<BM, kCols>;
  using Raw = TileRaw<DecodeQ4_0>;
  const int tid = static_cast<int>(threadIdx.x);
  unsigned char* planes = smem;
  unsigned char* raw = smem + L::kPlanes;
  const float** x_tab = reinterpret_cast<const float**>(raw + L::kRaw);
  const uint8_t** w_tab = reinterpret_cast<const uint8_t**>(x_tab + BM);
  if (tid < BM) x_tab[tid] = x_row_of(tid);
  bool row_aligned16 = true;
  if (tid < kCols) {
    w_tab[tid] = w_row_of(tid);
    row_aligned16 = (reinterpret_cast<uintptr_t>(w_tab[tid]) & 15u) == 0;
  }
  const bool rows_aligned16 = __syncthreads_and(row_aligned16) != 0;  // uniform over the block

  const int lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
  const int m0 = 16 * L::kWm * (warp % L::kMGroups);  // first weight row (tile column) of the warp
  const int n0 = 8 * L::kWn * (warp / L::kMGroups);   // first activation row of the warp
  const bool live = n0 < num_live_rows;               // all-padding warps skip the math
  float acc[L::kWm][L::kWn][4];
#pragma unroll
  for (int i = 0; i < L::kWm; ++i) {
#pragma unroll
    for (int n = 0; n < L::kWn; ++n) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.0f;
  }

  const int num_windows = static_cast<int>((num_in + kTileWindow - 1) / kTileWindow);
  auto window_len = [&](int w) { return static_cast<int>(min(static_cast<int64_t>(kTileWindow), num_in - int64_t{kTileWindow} * w)); };
  const ExactRowStager<kCols> stager(w_tab, ends);
  // Raw window w into stage `at`: the aligned-rows form where it applies.
  auto stage_raw = [&](unsigned char* at, int w) {
    if (rows_aligned16) {
      stager.stage(at, int64_t{kTileWindow} * w, window_len(w));
    } else {
      tile_stage_raw<DecodeQ4_0, kCols>(w_tab, at, int64_t{kTileWindow} * w, window_len(w), w_aligned16, ends);
    }
  };
  stage_raw(raw, 0);
  async_commit();
  float4 xv[ExactPlanes<BM>::kXUnits];
  exact_load_x<BM>(x_tab, 0, window_len(0), xv);

  for (int w = 0; w < num_windows; ++w) {
    const int64_t k0 = int64_t{kTileWindow} * w;
    const int kw = window_len(w);
    const bool more = w + 1 < num_windows;
    __syncthreads();  // everyone is done with the planes and with the other raw stage
    exact_store_planes<BM>(xv, planes);
    if (more) {
      stage_raw(raw + ((w + 1) & 1) * (kCols * Raw::kRowStride), w + 1);
      async_commit();
      exact_load_x<BM>(x_tab, k0 + kTileWindow, window_len(w + 1), xv);  // in flight during the math
      async_wait<1>();  // raw window w (w + 1 may still be in flight)
    } else {
      async_wait<0>();
    }
    __syncthreads();
    if (!live) continue;

    // This window's raw rows g and g + 8 of each weight tile: where the span starts in the stage.
    const unsigned char* stage = raw + (w & 1) * (kCols * Raw::kRowStride);
    const int64_t byte_off = (k0 / 32) * 18;
    const unsigned char* row_g[L::kWm];
    const unsigned char* row_g8[L::kWm];
#pragma unroll
    for (int i = 0; i < L::kWm; ++i) {
      const int rg = m0 + 16 * i + g, rg8 = rg + 8;
      row_g[i] = stage + rg * Raw::kRowStride + ((reinterpret_cast<uintptr_t>(w_tab[rg]) + byte_off) & 15u);
      row_g8[i] = stage + rg8 * Raw::kRowStride + ((reinterpret_cast<uintptr_t>(w_tab[rg8]) + byte_off) & 15u);
    }
    // Block j of the window (32 inputs) into the warp's tiles.
    auto block_step = [&](int j) {
      mma::Q4_0Fragments a[L::kWm];
      float d_g[L::kWm], d_g8[L::kWm];
#pragma unroll
      for (int i = 0; i < L::kWm; ++i) {
        const unsigned char* bg = row_g[i] + 18 * j;
        const unsigned char* bg8 = row_g8[i] + 18 * j;
        d_g[i] = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(bg));
        d_g8[i] = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(bg8));
        a[i] = mma::q4_0_fragments(smem_u32_align2(bg + 2 + 4 * c), smem_u32_align2(bg8 + 2 + 4 * c));
      }
#pragma unroll
      for (int n = 0; n < L::kWn; ++n) {
        const size_t at = sizeof(uint16_t) * (static_cast<size_t>(n0 + 8 * n + g) * kExactPlaneStride + 32 * j + 4 * c);
        uint32_t b_lo[3][2], b_hi[3][2];
#pragma unroll
        for (int p = 0; p < 3; ++p) {
          const uint2 lo = *reinterpret_cast<const uint2*>(planes + p * L::kPlane + at);
          const uint2 hi = *reinterpret_cast<const uint2*>(planes + p * L::kPlane + at + 2 * 16);
          b_lo[p][0] = lo.x, b_lo[p][1] = lo.y, b_hi[p][0] = hi.x, b_hi[p][1] = hi.y;
        }
#pragma unroll
        for (int i = 0; i < L::kWm; ++i) mma::q4_0_block_mma(acc[i][n], a[i], b_lo, b_hi, d_g[i], d_g8[i]);
      }
    };
    // One tile per warp (the decode-sized 8-pair tiles): a full window unrolled, so the blocks'
    // loads and conversions overlap. Larger warp tiles keep the loop (unrolled, the 16-pair
    // tile needs 88 registers instead of 70: 2 blocks per SM instead of 3).
    if (L::kTilesPerWarp == 1 && kw == kTileWindow) {
#pragma unroll
      for (int j = 0; j < kTileWindow / 32; ++j) block_step(j);
    } else {
      for (int j = 0; j < kw / 32; ++j) block_step(j);
    }
  }
  __syncthreads();  // the planes become the C tile
  float* ct = reinterpret_cast<float*>(smem);
  if (live) {
#pragma unroll
    for (int i = 0; i < L::kWm; ++i) {
#pragma unroll
      for (int n = 0; n < L::kWn; ++n) {
        // c0, c1: weight row g, activation rows 2c, 2c + 1; c2, c3: weight row g + 8.
        const int col = m0 + 16 * i + g, row = n0 + 8 * n + 2 * c;
        ct[row * L::kCStride + col] = acc[i][n][0];
        ct[(row + 1) * L::kCStride + col] = acc[i][n][1];
        ct[row * L::kCStride + col + 8] = acc[i][n][2];
        ct[(row + 1) * L::kCStride + col + 8] = acc[i][n][3];
      }
    }
  }
  __syncthreads();
#else
  // Never launched: the callers pick kTensorExact only where the device has bf16 mma (and the
  // build has code for it).
  (void)x_row_of, (void)w_row_of, (void)num_in, (void)num_live_rows, (void)w_aligned16, (void)ends, (void)smem;
  __builtin_trap();
#endif
}

}  // namespace deltaserve::kernels::gpu
