// Tiled matmul for many activation rows (matmul_gpu.h, matmul_prefill_gpu): a block computes
// a 64-row x 64-output tile of y with 256 threads through matmul_tile.h's tile_run (kTensorExact:
// 32 rows x 128 outputs through matmul_tile_exact.h's tile_run_exact) (the
// expert-grouped matmul_experts_prefill_gpu runs the same tile code on smaller pair tiles;
// the per-element arithmetic does not depend on the tile, so its pairs get the same bits as
// this kernel on that expert's matrix). Each weight tile is decoded into shared memory once
// per 64 rows; each y[r][o] is one fused multiply-add chain over k, k ascending
// (MatmulMath::kTf32 on CUDA sm_80+: TF32 mma.sync steps of 8 over k, k ascending;
// kTensorExact, Q4_0 weights: matmul_tile_exact.h's exact bf16 products, per 32-element block).
//
// Shared memory: tile_smem_bytes / tile_exact_smem_bytes (dynamic, <= 100,352 bytes; CUDA
// raises the limit).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/matmul/matmul_tile.h"
#include "kernels/matmul/matmul_tile_exact.h"

namespace deltaserve::kernels {
namespace {

using gpu::DecodeF32;
using gpu::DecodeHalf;
using gpu::DecodeQ4_0;
using gpu::DecodeQ4_K;
using gpu::DecodeQ5_K;
using gpu::DecodeQ6_K;
using gpu::DecodeQ8_0;

constexpr int kThreads = gpu::kTileThreads;
constexpr int kTileRows = gpu::tile_rows(64);
constexpr int64_t kMaxGridY = 65535;

// Rows x outputs of a block's tile, and the C tile's row stride: tile_run's 64 x 64, or the exact
// tile's 32 x 128 (matmul_tile_exact.h: 128 weight rows per staged activation window; 32 rows
// keep the next window's activations in registers without spilling).
template <MatmulMath kMath>
struct Tile {
  static constexpr int kRows = kTileRows, kOut = gpu::kTileCols, kCStride = gpu::kTileCStride;
  static constexpr size_t smem_bytes(size_t tile_run_bytes) { return tile_run_bytes; }
};
#if defined(DS_GPU_CUDA)  // HIP never runs the exact tile
template <>
struct Tile<MatmulMath::kTensorExact> {
  static constexpr int kRows = 32, kOut = gpu::kExactTileCols, kCStride = gpu::ExactTile<kRows, kOut>::kCStride;
  static constexpr size_t smem_bytes(size_t) { return gpu::tile_exact_smem_bytes<kRows, kOut>(); }
};
#endif

// Block (x, y): outputs x * kOut.., rows (first_row_tile + y) * kRows.. .
template <class D, MatmulMath kMath>
__global__ void __launch_bounds__(kThreads) matmul_tiled_kernel(const MatmulArgs a, bool w_aligned16, int64_t first_row_tile) {
  gpu::begin_kernel();
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileRows = Tile<kMath>::kRows, kTileOut = Tile<kMath>::kOut;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row0 = (first_row_tile + static_cast<int64_t>(blockIdx.y)) * kTileRows;
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * kTileOut;
  const int num_live_rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), a.num_rows - row0));
  // Rows past num_rows are padding (nullptr: zeros); outputs past num_out decode the last row
  // (valid memory; never written out).
  auto x_row_of = [&](int r) -> const float* { return r < num_live_rows ? a.x + (row0 + r) * a.x_stride : nullptr; };
  auto w_row_of = [&](int c) -> const uint8_t* {
    return static_cast<const uint8_t*>(a.w) + static_cast<size_t>(min(out0 + c, a.num_out - 1)) * a.w_row_bytes;
  };
  const uint8_t* w_end = static_cast<const uint8_t*>(a.w) + static_cast<size_t>(a.num_out) * a.w_row_bytes;
  const gpu::TileWeightEnds ends{w_end, w_end, kTileOut};
  if constexpr (kMath == MatmulMath::kTensorExact) {
    gpu::tile_run_exact<kTileRows, kTileOut>(x_row_of, w_row_of, a.num_in, num_live_rows, w_aligned16, ends, smem);
  } else {
    gpu::tile_run<D, kTileRows, kMath == MatmulMath::kTf32>(x_row_of, w_row_of, a.num_in, num_live_rows, w_aligned16, ends, smem);
  }

  // Coalesced epilogue: consecutive threads write consecutive outputs of a row.
  const float* c = gpu::tile_c(smem);
  for (int i = tid; i < kTileRows * kTileOut; i += kThreads) {
    const int r = i / kTileOut, col = i % kTileOut;
    const int64_t o = out0 + col;
    if (r >= num_live_rows || o >= a.num_out) continue;
    float* y = a.y + (row0 + r) * a.y_stride + o;
    const float v = c[r * Tile<kMath>::kCStride + col];
    *y = a.accumulate ? *y + v : v;
  }
}

template <class D, MatmulMath kMath>
gpuError_t launch_math(const MatmulArgs& a, gpuStream_t stream) {
  constexpr size_t kSmemBytes = Tile<kMath>::smem_bytes(gpu::tile_smem_bytes<D, kTileRows>());
#if defined(DS_GPU_CUDA)
  const cudaError_t err = cudaFuncSetAttribute(matmul_tiled_kernel<D, kMath>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSmemBytes));
  if (err != cudaSuccess) return err;
#endif
  const int64_t row_tiles = (a.num_rows + Tile<kMath>::kRows - 1) / Tile<kMath>::kRows;
  for (int64_t first = 0; first < row_tiles; first += kMaxGridY) {
    const dim3 grid(static_cast<unsigned>((a.num_out + Tile<kMath>::kOut - 1) / Tile<kMath>::kOut),
                    static_cast<unsigned>(row_tiles - first < kMaxGridY ? row_tiles - first : kMaxGridY));
    gpu::launch(matmul_tiled_kernel<D, kMath>, grid, kThreads, kSmemBytes, stream, a, gpu::aligned16(a.w), first);
  }
  return gpuGetLastError();
}

// HIP has no TF32 or bf16 mma form: they run the f32 kernel there (one instantiation); so do
// kTensorExact for weights other than Q4_0 and devices without bf16 mma.
template <class D>
gpuError_t launch(const MatmulArgs& a, MatmulMath math, gpuStream_t stream) {
#if defined(DS_GPU_CUDA)
  if constexpr (std::is_same_v<D, DecodeQ4_0>) {
    if (math == MatmulMath::kTensorExact && tensor_exact_available()) return launch_math<D, MatmulMath::kTensorExact>(a, stream);
  }
  if (math == MatmulMath::kTf32) return launch_math<D, MatmulMath::kTf32>(a, stream);
#else
  (void)math;
#endif
  return launch_math<D, MatmulMath::kF32>(a, stream);
}

bool valid(const MatmulArgs& a) {
  int64_t block = 1;
  if (a.w_type == DType::Q8_0 || a.w_type == DType::Q4_0) block = 32;
  if (a.w_type == DType::Q4_K || a.w_type == DType::Q5_K || a.w_type == DType::Q6_K) block = 256;
  if (a.num_in <= 0 || a.num_in % 8 != 0 || a.num_in % block != 0) return false;
  if (!gpu::aligned16(a.x) || a.x_stride % 4 != 0) return false;
  const bool plain = a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16;
  if (plain && (!gpu::aligned16(a.w) || a.w_row_bytes % 16 != 0)) return false;
  return (reinterpret_cast<uintptr_t>(a.w) & 1u) == 0 && a.w_row_bytes % 2 == 0;
}

}  // namespace

bool tensor_exact_available() { return tensor_matvec_available(); }

gpuError_t matmul_prefill_gpu(const MatmulArgs& a, gpuStream_t stream, MatmulMath math) {
  if (!valid(a)) return gpuErrorInvalidValue;
  if (a.num_rows <= 0 || a.num_out <= 0) return gpuSuccess;
  switch (a.w_type) {
    case DType::F32: return launch<DecodeF32>(a, math, stream);
    case DType::F16: return launch<DecodeHalf<false>>(a, math, stream);
    case DType::BF16: return launch<DecodeHalf<true>>(a, math, stream);
    case DType::Q8_0: return launch<DecodeQ8_0>(a, math, stream);
    case DType::Q4_0: return launch<DecodeQ4_0>(a, math, stream);
    case DType::Q4_K: return launch<DecodeQ4_K>(a, math, stream);
    case DType::Q5_K: return launch<DecodeQ5_K>(a, math, stream);
    case DType::Q6_K: return launch<DecodeQ6_K>(a, math, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace deltaserve::kernels
