// The synchronous form of the tiled matmul's 64 x 64 tile (matmul_tile.h): the form HIP runs
// (its LDS is 64 KB per workgroup on gfx906 / gfx90a, too small for the pipelined form's
// buffers). Each thread stages its own activation row and weight row straight from global
// memory every 128-element window, then every thread's 4 x 4 accumulators take one fused
// multiply-add per (row, column, k), k ascending from 0 -- the same chain per element as the
// pipelined form's f32 math, so both forms give the same bits.
//
// Layout: thread t stages activation row t % 64 and weight column t % 64; it accumulates rows
// 4 * (t / 16) .. + 3 x columns 4 * (t % 16) .. + 3. Shared memory: kTileSyncSmemBytes,
// Xs[128][64] (k-major) + Ws[128][64] floats. Only for nvcc / hipcc translation units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels::gpu {

inline constexpr int kTileSyncRows = 64;
inline constexpr int kTileSyncCols = 64;
inline constexpr int kTileSyncWindow = 128;
inline constexpr size_t kTileSyncSmemBytes = sizeof(float) * kTileSyncWindow * (kTileSyncRows + kTileSyncCols);

// One window: threads whose 4 rows are all padding skip it (changes no live value).
__device__ __forceinline__ void tile_sync_window_fma(const float* xs, const float* ws, int kw, bool rows_live, float acc[4][4]) {
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  if (!rows_live) return;
#pragma unroll 8
  for (int k = 0; k < kw; ++k) {
    const float4 xv = *reinterpret_cast<const float4*>(xs + k * kTileSyncRows + 4 * ty);
    const float4 wv = *reinterpret_cast<const float4*>(ws + k * kTileSyncCols + 4 * tx);
    const float xr[4] = {xv.x, xv.y, xv.z, xv.w};
    const float wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(xr[i], wr[jj], acc[i][jj]);
    }
  }
}

// acc[i][j] = dot(W row of column 4tx + j, x row 4ty + i) over num_in (a multiple of 8 and of
// D's block). x_row: this thread's activation row (t % 64), nullptr for a padding row (reads
// as zeros); w_row: this thread's weight row (t % 64), always valid memory. Rows
// num_live_rows.. are padding (their acc is garbage). 256 threads, all must call it (barriers
// inside; ends with one, so the caller may reuse smem).
template <class D>
__device__ __forceinline__ void tile_sync_product(const float* x_row, const uint8_t* w_row, int64_t num_in, int num_live_rows,
                                                  float* smem, float acc[4][4]) {
  float* xs = smem;                                    // [kTileSyncWindow][kTileSyncRows]
  float* ws = smem + kTileSyncWindow * kTileSyncRows;  // [kTileSyncWindow][kTileSyncCols]
  const int tid = static_cast<int>(threadIdx.x);
  const int r = tid % kTileSyncRows, n = tid % kTileSyncCols;
  const bool rows_live = 4 * (tid / 16) < num_live_rows;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < num_in; k0 += kTileSyncWindow) {
    const int kw = static_cast<int>(min(static_cast<int64_t>(kTileSyncWindow), num_in - k0));  // a multiple of 8
#pragma unroll
    for (int j = 0; j < (kTileSyncRows * kTileSyncWindow / 4) / 256; ++j) {
      const int k = 4 * ((tid + 256 * j) / kTileSyncRows);
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (x_row != nullptr && k < kw) v = *reinterpret_cast<const float4*>(x_row + k0 + k);
      xs[(k + 0) * kTileSyncRows + r] = v.x;
      xs[(k + 1) * kTileSyncRows + r] = v.y;
      xs[(k + 2) * kTileSyncRows + r] = v.z;
      xs[(k + 3) * kTileSyncRows + r] = v.w;
    }
#pragma unroll
    for (int j = 0; j < (kTileSyncCols * kTileSyncWindow / 8) / 256; ++j) {
      const int cl = (tid + 256 * j) / kTileSyncCols;
      if (8 * cl >= kw) continue;  // past the end of a short last window: never read
      float v[8];
      int64_t x0 = 0, x1 = 0;
      D::decode(w_row, k0 / 8 + cl, v, x0, x1);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ws[(x0 - k0 + i) * kTileSyncCols + n] = v[i];
        ws[(x1 - k0 + i) * kTileSyncCols + n] = v[4 + i];
      }
    }
    __syncthreads();
    tile_sync_window_fma(xs, ws, kw, rows_live, acc);
    __syncthreads();
  }
}

}  // namespace deltaserve::kernels::gpu
