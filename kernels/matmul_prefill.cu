// Tiled matmul for many activation rows (matmul_gpu.h, matmul_prefill_gpu): a block computes
// a 64-row x 64-output tile of y with 256 threads, each thread a 4 x 4 sub-tile. The input
// dimension goes in windows of 128 elements: the block decodes its 64 weight rows' 16 chunks
// per window (the gpu_decode.h chunk layouts: every type's chunks 16w .. 16w + 15 cover
// exactly elements 128w .. 128w + 127) into shared memory once, so each weight byte is read
// from memory once per 64 rows instead of once per row; the activations' window goes to
// shared memory beside it, transposed (k-major), and the thread's 4 x 4 accumulators take one
// fused multiply-add per (row, output, k), k ascending.
//
// Shared memory: Xs[128][64] + Ws[128][64] floats = 64 KB (dynamic; CUDA raises the limit,
// and 64 KB is the LDS of one workgroup on gfx906 / gfx90a).
#include <cstddef>
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/gpu_decode.h"
#include "kernels/matmul_gpu.h"

namespace deltaserve::kernels {
namespace {

using gpu::DecodeF32;
using gpu::DecodeHalf;
using gpu::DecodeQ4_0;
using gpu::DecodeQ4_K;
using gpu::DecodeQ6_K;
using gpu::DecodeQ8_0;

constexpr int kThreads = 256;
constexpr int kTileRows = 64;
constexpr int kTileOut = 64;
constexpr int kWindow = 128;                    // input elements per step
constexpr int kChunksPerWindow = kWindow / 8;   // 16
constexpr size_t kSmemBytes = sizeof(float) * kWindow * (kTileRows + kTileOut);

template <class D>
__global__ void __launch_bounds__(kThreads) matmul_tiled_kernel(const MatmulArgs a) {
  extern __shared__ float smem[];
  float* xs = smem;                       // [kWindow][kTileRows]
  float* ws = smem + kWindow * kTileRows;  // [kWindow][kTileOut]
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;  // outputs 4tx.., rows 4ty..
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * kTileOut;
  const uint8_t* w = static_cast<const uint8_t*>(a.w);

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  }

  for (int64_t k0 = 0; k0 < a.num_in; k0 += kWindow) {
    const int kw = static_cast<int>(min(static_cast<int64_t>(kWindow), a.num_in - k0));  // a multiple of 8
    // Activations: 64 rows x 32 float4s; rows past num_rows and k past kw read as zero.
#pragma unroll
    for (int j = 0; j < (kTileRows * kWindow / 4) / kThreads; ++j) {
      const int idx = tid + kThreads * j;
      const int r = idx % kTileRows, k = 4 * (idx / kTileRows);
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row0 + r < a.num_rows && k < kw) v = *reinterpret_cast<const float4*>(a.x + (row0 + r) * a.x_stride + k0 + k);
      xs[(k + 0) * kTileRows + r] = v.x;
      xs[(k + 1) * kTileRows + r] = v.y;
      xs[(k + 2) * kTileRows + r] = v.z;
      xs[(k + 3) * kTileRows + r] = v.w;
    }
    // Weights: 64 outputs x 16 chunks, decoded to their element positions in the window.
    // Outputs past num_out decode the last row (valid memory; never written out).
#pragma unroll
    for (int j = 0; j < (kTileOut * kChunksPerWindow) / kThreads; ++j) {
      const int idx = tid + kThreads * j;
      const int n = idx % kTileOut, cl = idx / kTileOut;
      if (8 * cl >= kw) continue;  // past the end of a short last window: never read
      const int64_t o = min(out0 + n, a.num_out - 1);
      float v[8];
      int64_t x0 = 0, x1 = 0;
      D::decode(w + static_cast<size_t>(o) * a.w_row_bytes, k0 / 8 + cl, v, x0, x1);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ws[(x0 - k0 + i) * kTileOut + n] = v[i];
        ws[(x1 - k0 + i) * kTileOut + n] = v[4 + i];
      }
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kw; ++k) {
      const float4 xv = *reinterpret_cast<const float4*>(xs + k * kTileRows + 4 * ty);
      const float4 wv = *reinterpret_cast<const float4*>(ws + k * kTileOut + 4 * tx);
      const float xr[4] = {xv.x, xv.y, xv.z, xv.w};
      const float wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(xr[i], wr[jj], acc[i][jj]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + 4 * ty + i;
    if (r >= a.num_rows) continue;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int64_t o = out0 + 4 * tx + jj;
      if (o >= a.num_out) continue;
      float* y = a.y + r * a.y_stride + o;
      *y = a.accumulate ? *y + acc[i][jj] : acc[i][jj];
    }
  }
}

template <class D>
gpuError_t launch(const MatmulArgs& a, gpuStream_t stream) {
#if defined(DS_GPU_CUDA)
  const cudaError_t err =
      cudaFuncSetAttribute(matmul_tiled_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (err != cudaSuccess) return err;
#endif
  const dim3 grid(static_cast<unsigned>((a.num_out + kTileOut - 1) / kTileOut),
                  static_cast<unsigned>((a.num_rows + kTileRows - 1) / kTileRows));
  matmul_tiled_kernel<D><<<grid, kThreads, kSmemBytes, stream>>>(a);
  return gpuGetLastError();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

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

gpuError_t matmul_prefill_gpu(const MatmulArgs& a, gpuStream_t stream) {
  if (!valid(a) || a.num_rows > int64_t{65535} * kTileRows) return gpuErrorInvalidValue;
  if (a.num_rows <= 0 || a.num_out <= 0) return gpuSuccess;
  switch (a.w_type) {
    case DType::F32: return launch<DecodeF32>(a, stream);
    case DType::F16: return launch<DecodeHalf<false>>(a, stream);
    case DType::BF16: return launch<DecodeHalf<true>>(a, stream);
    case DType::Q8_0: return launch<DecodeQ8_0>(a, stream);
    case DType::Q4_0: return launch<DecodeQ4_0>(a, stream);
    case DType::Q4_K: return launch<DecodeQ4_K>(a, stream);
    case DType::Q6_K: return launch<DecodeQ6_K>(a, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace deltaserve::kernels
