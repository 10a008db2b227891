// The tile product shared by the tiled matmuls (matmul_prefill.cu's matmul_prefill_gpu and
// matmul_experts_prefill.cu): one block of kTileThreads threads computes C[r][c] =
// dot(x row r, W row c) for a tile of BM activation rows (16, 32 or 64) x kTileCols (64)
// weight rows, and leaves C in shared memory for the caller's epilogue (tile_c).
//
// Per element the arithmetic is fixed by (x row, W row, num_in, math) alone, whatever BM, the
// tile the row lands in or its position there:
//  - f32: one fused multiply-add chain over k, k ascending from 0;
//  - TF32 (CUDA sm_80+): x and W values rounded to TF32 (cvt.rna), one mma.sync m16n8k8 per
//    8-wide k step, k steps ascending, f32 accumulation in the mma.
// So every BM gives the same bits: the expert kernel's small pair tiles equal
// matmul_prefill_gpu's 64-row tiles, and any row alone equals that row in any batch.
//
// The pipelined form (CUDA): the input dimension goes in 128-element windows. The raw weight
// bytes of window w + 1 (quantised types: each row's span of blocks, as 16-byte cp.async
// copies from the 16-byte boundary below it) and the activations of window w (cp.async, rows
// k-contiguous) load while the block decodes window w's raw bytes from shared memory into a
// k-major f32 tile and multiplies; two barriers per window. F32/F16/BF16 weights decode
// straight from global memory (their raw bytes are the decoded tile's size). HIP runs the
// synchronous form (matmul_tile_sync.h: 64 rows only; its LDS is too small for these buffers)
// with the f32 math, so kTf32 is f32 there and the bits equal CUDA's f32 form.
//
// Shared memory: tile_smem_bytes<D, BM>() (dynamic; CUDA callers raise the limit; <= 100,352
// bytes, under sm_86/89's 101,376). Only for nvcc / hipcc translation units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/async_copy.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"
#include "kernels/matmul/matmul_tile_sync.h"

namespace deltaserve::kernels::gpu {

inline constexpr int kTileThreads = 256;
inline constexpr int kTileCols = 64;
inline constexpr int kTileWindow = 128;               // input elements per step
inline constexpr int kTileXStride = kTileWindow + 4;  // floats per staged x row (mma A loads: no bank conflicts)
inline constexpr int kTileWStride = kTileCols + 8;    // floats per decoded k row (mma B loads: no bank conflicts)
inline constexpr int kTileCStride = kTileCols + 4;    // floats per row of the result tile

// cp.async and mma.sync TF32: CUDA device code for sm_80 and up. Below (or in the host pass)
// the same layout is filled by plain loads and the TF32 form is the f32 one.
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DS_TILE_SM80 1
#else
#define DS_TILE_SM80 0
#endif

// Raw weight bytes staged per window (quantised types): decode unit (elements, bytes; a K-quant
// window is half a super-block, so its whole super-block is staged) and the shared-memory row
// stride: the span plus up to 14 bytes below it (the copies start at a 16-byte boundary),
// rounded up to 16 and, where it fits, an odd multiple of 16 (fewer bank conflicts on decode).
template <class D>
struct TileRaw {
  static constexpr bool kStaged = false;
  static constexpr int kUnitElems = 8, kUnitBytes = 0, kRowStride = 0;
};
template <>
struct TileRaw<DecodeQ8_0> {
  static constexpr bool kStaged = true;
  static constexpr int kUnitElems = 32, kUnitBytes = 34, kRowStride = 176;  // 136 + 14
};
template <>
struct TileRaw<DecodeQ4_0> {
  static constexpr bool kStaged = true;
  static constexpr int kUnitElems = 32, kUnitBytes = 18, kRowStride = 112;  // 72 + 14
};
template <>
struct TileRaw<DecodeQ4_K> {
  static constexpr bool kStaged = true;
  static constexpr int kUnitElems = 256, kUnitBytes = 144, kRowStride = 176;  // 144 + 14
};
template <>
struct TileRaw<DecodeQ5_K> {
  static constexpr bool kStaged = true;
  static constexpr int kUnitElems = 256, kUnitBytes = 176, kRowStride = 208;  // 176 + 14, odd x 16
};
template <>
struct TileRaw<DecodeQ6_K> {
  static constexpr bool kStaged = true;
  static constexpr int kUnitElems = 256, kUnitBytes = 210, kRowStride = 224;  // 210 + 14
};

// Shared-memory map of the pipelined form: Ws (decoded window, k-major [128][kTileWStride];
// the C tile [BM][kTileCStride] after the last window), Xs ([BM][kTileXStride]), two raw
// stages [64][kRowStride], the row tables (BM x pointers, 64 W pointers).
template <class D, int BM>
struct TileSmem {
  static constexpr size_t kWs = sizeof(float) * kTileWindow * kTileWStride;
  static constexpr size_t kXs = sizeof(float) * BM * kTileXStride;
  static constexpr size_t kRaw = TileRaw<D>::kStaged ? size_t{2} * kTileCols * TileRaw<D>::kRowStride : 0;
  static constexpr size_t kTables = sizeof(void*) * (BM + kTileCols);
  static constexpr size_t kBytes = kWs + kXs + kRaw + kTables;
  static_assert(sizeof(float) * BM * kTileCStride <= kWs, "the C tile reuses Ws");
};

template <class D, int BM>
constexpr size_t tile_smem_bytes() {
#if defined(DS_GPU_CUDA)
  return TileSmem<D, BM>::kBytes;
#else
  return kTileSyncSmemBytes;
#endif
}

// Rows per tile the build can run: HIP's synchronous form has 64 only.
constexpr int tile_rows(int wanted) {
#if defined(DS_GPU_CUDA)
  return wanted;
#else
  return (void)wanted, 64;
#endif
}

__device__ __forceinline__ const float* tile_c(const unsigned char* smem) { return reinterpret_cast<const float*>(smem); }

// Copy bytes [lo, hi) of the 16-byte unit at src (hi <= 16, both even) to dst (16-byte aligned
// shared memory). aligned16: src is 16-byte aligned and bytes [0, lo) are readable too (then
// one cp.async reads [0, hi), zero-filling the rest; without sm_80 a plain load).
__device__ __forceinline__ void tile_copy_unit(void* dst, const uint8_t* src, int lo, int hi, bool aligned16) {
#if DS_TILE_SM80
  if (aligned16) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(hi) : "memory");
    return;
  }
#endif
  if (aligned16 && lo == 0 && hi == 16) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    return;
  }
  for (int b = lo; b < hi; b += 2) {
    reinterpret_cast<uint16_t*>(dst)[b / 2] = *reinterpret_cast<const uint16_t*>(src + b);
  }
}

// Where the weight bytes of a tile's columns end: columns [0, second_first_col) read one
// matrix (ending at first), the rest another (ending at second; the gated expert tiles' W_up).
struct TileWeightEnds {
  const uint8_t* first;
  const uint8_t* second;
  int second_first_col;
};

// A window's raw span of one row: byte offset of its first decode unit, the window's first
// chunk within the span, span bytes.
struct TileSpan {
  int64_t byte_off;
  int chunk_off;
  int num_bytes;
};

template <class D>
__device__ __forceinline__ TileSpan tile_span(int64_t k0, int kw) {
  constexpr int kUe = TileRaw<D>::kUnitElems, kUb = TileRaw<D>::kUnitBytes;
  const int64_t unit0 = k0 / kUe;
  const int in_unit = static_cast<int>(k0 - unit0 * kUe);
  return TileSpan{unit0 * kUb, in_unit / 8, (in_unit + kw + kUe - 1) / kUe * kUb};
}

// Raw bytes of window (k0, kw) of the 64 W rows into one stage: units of 16 bytes from the
// 16-byte boundary at or below each row's span; row n's span starts at byte (start & 15).
// ends: where each column's weights end (TileWeightEnds); a unit whose 16 bytes would pass
// it (a matrix's last row's last bytes) is copied by 2-byte loads: a cp.async with a shorter
// source size reads only that size, but compute-sanitizer's memcheck counts all 16 bytes (it
// reported reads past the end of the weights' allocation), so none is issued past an end.
// kRows: the W rows of the tile (matmul_tile_exact.h's wider tiles stage 128).
template <class D, int kRows = kTileCols>
__device__ __forceinline__ void tile_stage_raw(const uint8_t* const* w_tab, unsigned char* stage, int64_t k0, int kw,
                                               bool aligned16, const TileWeightEnds& ends) {
  constexpr int kRs = TileRaw<D>::kRowStride, kUnits = kRs / 16;
  const TileSpan sp = tile_span<D>(k0, kw);
  for (int u = static_cast<int>(threadIdx.x); u < kRows * kUnits; u += kTileThreads) {
    const int n = u / kUnits, j = u - n * kUnits;
    const uint8_t* start = w_tab[n] + sp.byte_off;
    const int pad = static_cast<int>(reinterpret_cast<uintptr_t>(start) & 15u);
    const int len = pad + sp.num_bytes;
    if (16 * j >= len) continue;
    const uint8_t* unit = start - pad + 16 * j;
    const uint8_t* end = n < ends.second_first_col ? ends.first : ends.second;
    tile_copy_unit(stage + n * kRs + 16 * j, unit, max(pad - 16 * j, 0), min(len - 16 * j, 16), aligned16 && unit + 16 <= end);
  }
}

// Activations of window (k0, kw): BM rows x 32 units; padding rows and k >= kw are zeros.
template <int BM>
__device__ __forceinline__ void tile_stage_x(const float* const* x_tab, float* xs, int64_t k0, int kw) {
  for (int u = static_cast<int>(threadIdx.x); u < BM * (kTileWindow / 4); u += kTileThreads) {
    const int r = u / (kTileWindow / 4), j = u % (kTileWindow / 4);
    const float* xr = x_tab[r];
    const bool live = xr != nullptr && 4 * j < kw;
    const float* src = (live ? xr : x_tab[0]) + k0 + 4 * j;  // row 0 is always live: a valid address
    float* dst = xs + r * kTileXStride + 4 * j;
#if DS_TILE_SM80
    tile_copy_unit(dst, reinterpret_cast<const uint8_t*>(src), 0, live ? 16 : 0, true);
#else
    *reinterpret_cast<float4*>(dst) = live ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
  }
}

// Window (k0, kw) decoded into Ws: thread t decodes column t % 64, chunks t / 64 + 4j (the
// gpu_decode.h layouts: chunks 16w .. 16w + 15 of a row cover elements 128w .. 128w + 127).
template <class D>
__device__ __forceinline__ void tile_decode(const uint8_t* w_row, const unsigned char* stage, int64_t k0, int kw, float* ws) {
  const int tid = static_cast<int>(threadIdx.x), n = tid % kTileCols;
  const uint8_t* row = w_row;
  int64_t chunk0 = k0 / 8;
  if constexpr (TileRaw<D>::kStaged) {
    const TileSpan sp = tile_span<D>(k0, kw);
    const int pad = static_cast<int>(reinterpret_cast<uintptr_t>(w_row + sp.byte_off) & 15u);
    row = stage + n * TileRaw<D>::kRowStride + pad;
    chunk0 = sp.chunk_off;
  }
  const int64_t elem0 = 8 * chunk0;
#pragma unroll
  for (int j = 0; j < (kTileCols * kTileWindow / 8) / kTileThreads; ++j) {
    const int cl = tid / kTileCols + (kTileThreads / kTileCols) * j;
    if (8 * cl >= kw) continue;  // past the end of a short last window: never read
    float v[8];
    int64_t x0 = 0, x1 = 0;
    D::decode(row, chunk0 + cl, v, x0, x1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ws[(x0 - elem0 + i) * kTileWStride + n] = v[i];
      ws[(x1 - elem0 + i) * kTileWStride + n] = v[4 + i];
    }
  }
}

// The multiply of one window (Xs, Ws) into the thread's accumulators, and their store into the
// C tile. Rows num_live_rows.. are padding: a thread or warp whose rows are all padding skips
// the window (it changes no live value; padding rows of C are garbage, never written out).
template <int BM, bool kTensorCores>
struct TileMath;

// f32: thread t owns rows (BM / 16) * (t / 16) + i x columns 4 * (t % 16) + j; per k one fused
// multiply-add per element, k ascending (k in steps of 4 for float4 loads, inner k ascending).
template <int BM>
struct TileMath<BM, false> {
  static constexpr int kTm = BM / 16;
  float c[kTm][4];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kTm; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
  }
  __device__ __forceinline__ void window(const float* xs, const float* ws, int kw, int num_live_rows) {
    const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
    if (kTm * ty >= num_live_rows) return;
    const float* xr = xs + kTm * ty * kTileXStride;
    const float* wr = ws + 4 * tx;
#pragma unroll 2
    for (int k = 0; k < kw; k += 4) {
      float4 xv[kTm], wv[4];
#pragma unroll
      for (int i = 0; i < kTm; ++i) xv[i] = *reinterpret_cast<const float4*>(xr + i * kTileXStride + k);
#pragma unroll
      for (int q = 0; q < 4; ++q) wv[q] = *reinterpret_cast<const float4*>(wr + (k + q) * kTileWStride);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
#pragma unroll
        for (int i = 0; i < kTm; ++i) {
          const float xq = q == 0 ? xv[i].x : q == 1 ? xv[i].y : q == 2 ? xv[i].z : xv[i].w;
          c[i][0] = fmaf(xq, wv[q].x, c[i][0]);
          c[i][1] = fmaf(xq, wv[q].y, c[i][1]);
          c[i][2] = fmaf(xq, wv[q].z, c[i][2]);
          c[i][3] = fmaf(xq, wv[q].w, c[i][3]);
        }
      }
    }
  }
  __device__ __forceinline__ void store(float* ct) const {
    const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
#pragma unroll
    for (int i = 0; i < kTm; ++i) {
      *reinterpret_cast<float4*>(ct + (kTm * ty + i) * kTileCStride + 4 * tx) = make_float4(c[i][0], c[i][1], c[i][2], c[i][3]);
    }
  }
};

#if DS_TILE_SM80
__device__ __forceinline__ uint32_t tile_tf32(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

// TF32 tensor cores: BM / 16 row blocks of 16 x 8 column blocks of 8, each warp one row block
// (16 * wm ..) and BM / 16 adjacent column blocks; per 8-wide k step one mma.sync m16n8k8 per
// column block (PTX fragment layouts: a0..a3 = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4];
// b0, b1 = B[t][g], B[t+4][g]; c0..c3 = C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1];
// g = lane / 4, t = lane % 4).
template <int BM>
struct TileMath<BM, true> {
  static constexpr int kM = BM / 16, kWarpsN = (kTileThreads / 32) / kM;
  static_assert(kM * 8 * kWarpsN == kTileCols, "warps cover the 64 columns");
  float c[kM][4];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int j = 0; j < kM; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
  }
  __device__ __forceinline__ void window(const float* xs, const float* ws, int kw, int num_live_rows) {
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const int g = lane / 4, t = lane % 4, wm = warp / kWarpsN, wn = warp % kWarpsN;
    if (16 * wm >= num_live_rows) return;
    const float* xa = xs + (16 * wm + g) * kTileXStride + t;
    const float* wb = ws + t * kTileWStride + 8 * kM * wn + g;
    for (int k = 0; k < kw; k += 8) {
      const uint32_t a0 = tile_tf32(xa[k]), a1 = tile_tf32(xa[8 * kTileXStride + k]);
      const uint32_t a2 = tile_tf32(xa[k + 4]), a3 = tile_tf32(xa[8 * kTileXStride + k + 4]);
#pragma unroll
      for (int j = 0; j < kM; ++j) {
        const uint32_t b0 = tile_tf32(wb[k * kTileWStride + 8 * j]), b1 = tile_tf32(wb[(k + 4) * kTileWStride + 8 * j]);
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  __device__ __forceinline__ void store(float* ct) const {
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const int g = lane / 4, t = lane % 4, wm = warp / kWarpsN, wn = warp % kWarpsN;
#pragma unroll
    for (int j = 0; j < kM; ++j) {
      float* p = ct + (16 * wm + g) * kTileCStride + 8 * (kM * wn + j) + 2 * t;
      *reinterpret_cast<float2*>(p) = make_float2(c[j][0], c[j][1]);
      *reinterpret_cast<float2*>(p + 8 * kTileCStride) = make_float2(c[j][2], c[j][3]);
    }
  }
};
#endif

// C[r][c] = dot(x_row_of(r), W row w_row_of(c)) over num_in (a multiple of 8 and of D's block)
// into tile_c(smem) [BM][kTileCStride], rows < num_live_rows valid (1 <= num_live_rows <= BM).
// x_row_of(r): activation row r, nullptr for padding rows r >= num_live_rows; w_row_of(c):
// weight row of column c, always valid memory (a padding column repeats a real row).
// w_aligned16: every W row pointer's 16-byte boundary at or below it is inside the weights
// (the stacked tensor is 16-byte aligned): then raw copies are 16-byte cp.async. ends: where
// the weights of each column end (no copy reads past them). All threads call it; barriers
// inside; it returns after a barrier, C ready.
template <class D, int BM, bool kTf32, class XRowOf, class WRowOf>
__device__ __forceinline__ void tile_run(XRowOf x_row_of, WRowOf w_row_of, int64_t num_in, int num_live_rows, bool w_aligned16,
                                         const TileWeightEnds& ends, unsigned char* smem) {
  const int tid = static_cast<int>(threadIdx.x);
#if defined(DS_GPU_CUDA)
  using L = TileSmem<D, BM>;
  float* ws = reinterpret_cast<float*>(smem);
  float* xs = reinterpret_cast<float*>(smem + L::kWs);
  unsigned char* raw = smem + L::kWs + L::kXs;
  const float** x_tab = reinterpret_cast<const float**>(raw + L::kRaw);
  const uint8_t** w_tab = reinterpret_cast<const uint8_t**>(x_tab + BM);
  if (tid < BM) x_tab[tid] = x_row_of(tid);
  if (tid < kTileCols) w_tab[tid] = w_row_of(tid);
  __syncthreads();
  const uint8_t* my_w = w_tab[tid % kTileCols];
  TileMath<BM, kTf32 && DS_TILE_SM80 != 0> math;
  math.zero();
  constexpr bool kStaged = TileRaw<D>::kStaged;
  const int num_windows = static_cast<int>((num_in + kTileWindow - 1) / kTileWindow);
  auto window_len = [&](int w) { return static_cast<int>(min(static_cast<int64_t>(kTileWindow), num_in - int64_t{kTileWindow} * w)); };
  if constexpr (kStaged) {
    tile_stage_raw<D>(w_tab, raw, 0, window_len(0), w_aligned16, ends);
    async_commit();
  }
  for (int w = 0; w < num_windows; ++w) {
    const int64_t k0 = int64_t{kTileWindow} * w;
    const int kw = window_len(w);
    unsigned char* stage = raw + (w & 1) * (kTileCols * TileRaw<D>::kRowStride);
    async_wait<0>();  // raw window w (issued one iteration ago)
    __syncthreads();       // ... visible to all; everyone is done with Xs, Ws and the other stage
    tile_stage_x<BM>(x_tab, xs, k0, kw);
    async_commit();
    const bool more = kStaged && w + 1 < num_windows;
    if constexpr (kStaged) {
      if (more) {
        tile_stage_raw<D>(w_tab, raw + ((w + 1) & 1) * (kTileCols * TileRaw<D>::kRowStride), k0 + kTileWindow,
                          window_len(w + 1), w_aligned16, ends);
        async_commit();
      }
    }
    tile_decode<D>(my_w, stage, k0, kw, ws);
    if (more) async_wait<1>();  // x window w (raw w + 1 may still be in flight)
    else async_wait<0>();
    __syncthreads();
    math.window(xs, ws, kw, num_live_rows);
  }
  __syncthreads();
  math.store(reinterpret_cast<float*>(smem));
  __syncthreads();
#else
  static_assert(BM == kTileSyncRows, "HIP: 64-row tiles only (tile_rows)");
  (void)w_aligned16;
  (void)ends;
  float acc[4][4];
  tile_sync_product<D>(x_row_of(tid % kTileSyncRows), w_row_of(tid % kTileSyncCols), num_in, num_live_rows,
                       reinterpret_cast<float*>(smem), acc);
  float* c = reinterpret_cast<float*>(smem);
  const int tx = tid % 16, ty = tid / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    *reinterpret_cast<float4*>(c + (4 * ty + i) * kTileCStride + 4 * tx) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  }
  __syncthreads();
#endif
}

}  // namespace deltaserve::kernels::gpu
