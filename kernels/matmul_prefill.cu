// Tiled matmul for many activation rows (matmul_gpu.h, matmul_prefill_gpu): a block computes
// a 64-row x 64-output tile of y with 256 threads through matmul_tile.h's tile_run (the
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

#include "kernels/gpu_compat.h"
#include "kernels/gpu_decode.h"
#include "kernels/matmul_gpu.h"
#include "kernels/matmul_tile.h"
#include "kernels/matmul_tile_exact.h"

namespace deltaserve::kernels {
namespace {

using gpu::DecodeF32;
using gpu::DecodeHalf;
using gpu::DecodeQ4_0;
using gpu::DecodeQ4_K;
using gpu::DecodeQ6_K;
using gpu::DecodeQ8_0;

constexpr int kThreads = gpu::kTileThreads;
constexpr int kTileOut = gpu::kTileCols;
constexpr int kTileRows = gpu::tile_rows(64);

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class D, MatmulMath kMath>
__global__ void __launch_bounds__(kThreads) matmul_tiled_kernel(const MatmulArgs a, bool w_aligned16) {
  gpu::begin_kernel();
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * kTileOut;
  const int num_live_rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), a.num_rows - row0));
  // Rows past num_rows are padding (nullptr: zeros); outputs past num_out decode the last row
  // (valid memory; never written out).
  auto x_row_of = [&](int r) -> const float* { return r < num_live_rows ? a.x + (row0 + r) * a.x_stride : nullptr; };
  auto w_row_of = [&](int c) -> const uint8_t* {
    return static_cast<const uint8_t*>(a.w) + static_cast<size_t>(min(out0 + c, a.num_out - 1)) * a.w_row_bytes;
  };
  const uint8_t* w_end = static_cast<const uint8_t*>(a.w) + static_cast<size_t>(a.num_out) * a.w_row_bytes;
  const gpu::TileWeightEnds ends{w_end, w_end, gpu::kTileCols};
  if constexpr (kMath == MatmulMath::kTensorExact) {
    gpu::tile_run_exact<kTileRows>(x_row_of, w_row_of, a.num_in, num_live_rows, w_aligned16, ends, smem);
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
    const float v = c[r * gpu::kTileCStride + col];
    *y = a.accumulate ? *y + v : v;
  }
}

template <class D, MatmulMath kMath>
gpuError_t launch_math(const MatmulArgs& a, gpuStream_t stream) {
  constexpr size_t kSmemBytes =
      kMath == MatmulMath::kTensorExact ? gpu::tile_exact_smem_bytes<kTileRows>() : gpu::tile_smem_bytes<D, kTileRows>();
#if defined(DS_GPU_CUDA)
  const cudaError_t err = cudaFuncSetAttribute(matmul_tiled_kernel<D, kMath>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSmemBytes));
  if (err != cudaSuccess) return err;
#endif
  const dim3 grid(static_cast<unsigned>((a.num_out + kTileOut - 1) / kTileOut),
                  static_cast<unsigned>((a.num_rows + kTileRows - 1) / kTileRows));
  gpu::launch(matmul_tiled_kernel<D, kMath>, grid, kThreads, kSmemBytes, stream, a, aligned16(a.w));
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
  if (a.w_type == DType::Q4_K || a.w_type == DType::Q6_K) block = 256;
  if (a.num_in <= 0 || a.num_in % 8 != 0 || a.num_in % block != 0) return false;
  if (!aligned16(a.x) || a.x_stride % 4 != 0) return false;
  const bool plain = a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16;
  if (plain && (!aligned16(a.w) || a.w_row_bytes % 16 != 0)) return false;
  return (reinterpret_cast<uintptr_t>(a.w) & 1u) == 0 && a.w_row_bytes % 2 == 0;
}

}  // namespace

bool tensor_exact_available() { return tensor_matvec_available(); }

gpuError_t matmul_prefill_gpu(const MatmulArgs& a, gpuStream_t stream, MatmulMath math) {
  if (!valid(a) || a.num_rows > int64_t{65535} * kTileRows) return gpuErrorInvalidValue;
  if (a.num_rows <= 0 || a.num_out <= 0) return gpuSuccess;
  switch (a.w_type) {
    case DType::F32: return launch<DecodeF32>(a, math, stream);
    case DType::F16: return launch<DecodeHalf<false>>(a, math, stream);
    case DType::BF16: return launch<DecodeHalf<true>>(a, math, stream);
    case DType::Q8_0: return launch<DecodeQ8_0>(a, math, stream);
    case DType::Q4_0: return launch<DecodeQ4_0>(a, math, stream);
    case DType::Q4_K: return launch<DecodeQ4_K>(a, math, stream);
    case DType::Q6_K: return launch<DecodeQ6_K>(a, math, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace deltaserve::kernels
