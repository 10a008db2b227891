// The 64 x 64 tile product shared by the tiled matmuls (matmul_prefill.cu, matmul_gpu.h's
// matmul_prefill_gpu, and matmul_experts_prefill.cu): one block of kTileThreads threads
// computes a 64-row x 64-column tile of dot products, each thread a 4 x 4 sub-tile (rows
// 4 * ty + i, columns 4 * tx + j; tile_row_block / tile_col_block).
//
// The input dimension goes in windows of 128 elements: the block decodes its 64 weight rows'
// 16 chunks per window (the gpu_decode.h chunk layouts: every type's chunks 16w .. 16w + 15
// cover exactly elements 128w .. 128w + 127) into shared memory once, so each weight byte is
// read once per 64 activation rows; the activations' window goes to shared memory beside it,
// transposed (k-major), and the thread's 4 x 4 accumulators take one fused multiply-add per
// (row, column, k), k ascending from 0.
//
// Batch invariance: a tile element's value is that one fixed chain over k; it depends only on
// its activation row and its weight row, never on the other rows or columns of the tile, so
// whichever rows share a tile (a prefill chunk, an expert's routed pairs) the bits are the same.
//
// Who loads what: thread t always stages activation row tile_load_row(t) and weight row
// (column) tile_load_col(t) of the tile (both t % 64), so the caller hands each thread the two
// row pointers it owns: the gather (which x row, which expert, which output, a W or W_up row)
// is the caller's, the arithmetic is here. Shared memory: kTileSmemBytes of dynamic shared
// memory, Xs[128][64] + Ws[128][64] floats = 64 KB (CUDA callers raise the limit; 64 KB is
// the LDS of one workgroup on gfx906 / gfx90a). Only for nvcc / hipcc translation units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu_compat.h"

#if defined(DS_GPU_CUDA)
#include <mma.h>
#endif

namespace deltaserve::kernels::gpu {

inline constexpr int kTileThreads = 256;
inline constexpr int kTileRows = 64;
inline constexpr int kTileCols = 64;
inline constexpr int kTileWindow = 128;                      // input elements per step
inline constexpr int kTileChunksPerWindow = kTileWindow / 8;  // 16
inline constexpr size_t kTileSmemBytes = sizeof(float) * kTileWindow * (kTileRows + kTileCols);

__device__ __forceinline__ int tile_load_row(int tid) { return tid % kTileRows; }
__device__ __forceinline__ int tile_load_col(int tid) { return tid % kTileCols; }
__device__ __forceinline__ int tile_row_block(int tid) { return tid / 16; }  // rows 4 * ty ..
__device__ __forceinline__ int tile_col_block(int tid) { return tid % 16; }  // columns 4 * tx ..

// True where tile_product<D, true> really runs on TF32 tensor cores: CUDA device code for
// sm_80 and up. Elsewhere (HIP, older targets, the host pass) the TF32 form is the f32 one.
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DS_TILE_TF32 1
#else
#define DS_TILE_TF32 0
#endif

// The f32 form of one window: each thread's 4 x 4 accumulators take one fused multiply-add
// per k, k ascending; threads whose 4 rows are all padding skip it (whole warps when few rows
// are real: a warp's 32 threads share 8 rows), which changes no live value.
__device__ __forceinline__ void tile_window_fma(const float* xs, const float* ws, int kw, bool rows_live, float acc[4][4]) {
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tile_col_block(tid), ty = tile_row_block(tid);
  if (!rows_live) return;
#pragma unroll 8
  for (int k = 0; k < kw; ++k) {
    const float4 xv = *reinterpret_cast<const float4*>(xs + k * kTileRows + 4 * ty);
    const float4 wv = *reinterpret_cast<const float4*>(ws + k * kTileCols + 4 * tx);
    const float xr[4] = {xv.x, xv.y, xv.z, xv.w};
    const float wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(xr[i], wr[jj], acc[i][jj]);
    }
  }
}

#if DS_TILE_TF32
// The TF32 form: warp w owns rows 16 (w / 2) .. + 15 x columns 32 (w % 2) .. + 31 as two
// 16 x 16 f32 accumulator fragments; each 8-wide k step rounds its x and weight values to
// TF32 (round to nearest, cvt.rna) and does one m16n16k8 multiply-accumulate per fragment,
// k steps ascending. An output element's value depends only on its x row, its weight row and
// the hardware's fixed per-element dot product, so the batch invariance argument holds as for
// the f32 form (the tests check it bitwise: a row alone, at another tile position, is equal).
struct TileTf32 {
  using FragA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32,
                                       nvcuda::wmma::col_major>;
  using FragB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 8, nvcuda::wmma::precision::tf32,
                                       nvcuda::wmma::row_major>;
  using FragC = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>;
  FragC c[2];

  __device__ void zero() {
    nvcuda::wmma::fill_fragment(c[0], 0.0f);
    nvcuda::wmma::fill_fragment(c[1], 0.0f);
  }
  __device__ void window(const float* xs, const float* ws, int kw, int num_live_rows) {
    const int w = gpu::warp_id();
    const int row0 = 16 * (w / 2), col0 = 32 * (w % 2);
    if (row0 >= num_live_rows) return;  // all padding rows: never written out
    for (int k = 0; k < kw; k += 8) {
      FragA a;
      nvcuda::wmma::load_matrix_sync(a, xs + k * kTileRows + row0, kTileRows);  // xs is k-major: A column-major
#pragma unroll
      for (int t = 0; t < a.num_elements; ++t) a.x[t] = nvcuda::wmma::__float_to_tf32(a.x[t]);
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        FragB b;
        nvcuda::wmma::load_matrix_sync(b, ws + k * kTileCols + col0 + 16 * f, kTileCols);
#pragma unroll
        for (int t = 0; t < b.num_elements; ++t) b.x[t] = nvcuda::wmma::__float_to_tf32(b.x[t]);
        nvcuda::wmma::mma_sync(c[f], a, b, c[f]);
      }
    }
  }
  // The fragments into the thread layout of the f32 form (acc[i][j] = row 4ty + i, column
  // 4tx + j) through smem ([64][64] floats); barriers before and after.
  __device__ void to_acc(float* smem, float acc[4][4]) {
    const int w = gpu::warp_id();
    __syncthreads();
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      nvcuda::wmma::store_matrix_sync(smem + 16 * (w / 2) * kTileCols + 32 * (w % 2) + 16 * f, c[f], kTileCols,
                                      nvcuda::wmma::mem_row_major);
    }
    __syncthreads();
    const int tid = static_cast<int>(threadIdx.x);
    const int tx = tile_col_block(tid), ty = tile_row_block(tid);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(smem + (4 * ty + i) * kTileCols + 4 * tx);
      acc[i][0] = v.x, acc[i][1] = v.y, acc[i][2] = v.z, acc[i][3] = v.w;
    }
    __syncthreads();
  }
};
#endif

// acc[i][j] = dot(W row of column 4tx + j, x row 4ty + i) over num_in (a multiple of 8 and of
// D's block). x_row: this thread's activation row (tile_load_row), nullptr for a padding row
// (reads as zeros); w_row: this thread's weight row (tile_load_col), always valid memory (a
// padding column repeats a real row and is never written out). Rows num_live_rows.. of the
// tile are padding: their multiply-adds may be skipped (their acc is garbage, never written).
// kTf32: products of TF32-rounded inputs on tensor cores, f32 accumulation (CUDA sm_80+;
// elsewhere the f32 form). All threads of the block must call it (barriers inside); the
// caller must not touch smem around it without a barrier. smem: 32-byte aligned.
template <class D, bool kTf32 = false>
__device__ __forceinline__ void tile_product(const float* x_row, const uint8_t* w_row, int64_t num_in, int num_live_rows,
                                             float* smem, float acc[4][4]) {
  float* xs = smem;                            // [kTileWindow][kTileRows]
  float* ws = smem + kTileWindow * kTileRows;  // [kTileWindow][kTileCols]
  const int tid = static_cast<int>(threadIdx.x);
  const int r = tile_load_row(tid), n = tile_load_col(tid);
  const bool rows_live = 4 * tile_row_block(tid) < num_live_rows;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  }
#if DS_TILE_TF32
  TileTf32 tc;
  if constexpr (kTf32) tc.zero();
#endif

  for (int64_t k0 = 0; k0 < num_in; k0 += kTileWindow) {
    const int kw = static_cast<int>(min(static_cast<int64_t>(kTileWindow), num_in - k0));  // a multiple of 8
    // Activations: 64 rows x 32 float4s; padding rows and k past kw read as zero.
#pragma unroll
    for (int j = 0; j < (kTileRows * kTileWindow / 4) / kTileThreads; ++j) {
      const int k = 4 * ((tid + kTileThreads * j) / kTileRows);
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (x_row != nullptr && k < kw) v = *reinterpret_cast<const float4*>(x_row + k0 + k);
      xs[(k + 0) * kTileRows + r] = v.x;
      xs[(k + 1) * kTileRows + r] = v.y;
      xs[(k + 2) * kTileRows + r] = v.z;
      xs[(k + 3) * kTileRows + r] = v.w;
    }
    // Weights: 64 columns x 16 chunks, decoded to their element positions in the window.
#pragma unroll
    for (int j = 0; j < (kTileCols * kTileChunksPerWindow) / kTileThreads; ++j) {
      const int cl = (tid + kTileThreads * j) / kTileCols;
      if (8 * cl >= kw) continue;  // past the end of a short last window: never read
      float v[8];
      int64_t x0 = 0, x1 = 0;
      D::decode(w_row, k0 / 8 + cl, v, x0, x1);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ws[(x0 - k0 + i) * kTileCols + n] = v[i];
        ws[(x1 - k0 + i) * kTileCols + n] = v[4 + i];
      }
    }
    __syncthreads();
#if DS_TILE_TF32
    if constexpr (kTf32) tc.window(xs, ws, kw, num_live_rows);
    else tile_window_fma(xs, ws, kw, rows_live, acc);
#else
    tile_window_fma(xs, ws, kw, rows_live, acc);
#endif
    __syncthreads();
  }
#if DS_TILE_TF32
  if constexpr (kTf32) tc.to_acc(smem, acc);
#endif
}

}  // namespace deltaserve::kernels::gpu
