// GPU matrix-vector / small-batch matmul (matmul_gpu.h). One warp owns kOutputsPerWarp output
// features and all activation rows of its group; lane l walks 8-element chunks l, l + W, ...
// of the weight row, decodes each chunk once, and multiplies it into every row's
// accumulator. A chunk's 8 weights pair with two runs of 4 consecutive activations (x0..x0+3,
// x1..x1+3), the shape every block layout here decodes to, so activations load as float4.
//
// Bytes moved per output feature: the weight row once (coalesced: the lanes of a warp read
// consecutive chunks) plus the activation rows, which stay in L1/L2 across the block.
#include <cstddef>
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/gpu_decode.h"
#include "kernels/matmul_gpu.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;
using gpu::DecodeF32;
using gpu::DecodeHalf;
using gpu::DecodeQ8_0;
using gpu::DecodeQ4_0;
using gpu::DecodeQ4_K;
using gpu::DecodeQ6_K;

constexpr int kThreads = 128;
constexpr int kOutputsPerBlock = 8;
constexpr int kMaxRowsPerGroup = 8;
constexpr int64_t kMaxGridY = 65535;

struct MatvecParams {
  const uint8_t* w;
  size_t w_row_bytes;
  int64_t num_in;
  int64_t num_out;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int64_t num_rows;         // rows of y (pairs in expert mode)
  int64_t group_offset;     // first row group of this launch (grid.y limit)
  bool accumulate;
  const int32_t* expert_ids;  // expert mode (R == 1) when non-null
  size_t expert_bytes;
  int64_t pairs_per_x_row;
};

// Block: kThreads threads, kOutputsPerBlock outputs (kOutputsPerWarp per warp) x one group of
// up to R activation rows (grid.y). Rows past num_rows read row 0 of the group (valid memory)
// and are not written; outputs past num_out likewise.
template <class D, int R>
__global__ void __launch_bounds__(kThreads) matvec_kernel(const MatvecParams p) {
  constexpr int kWarps = kThreads / kWarpSize;
  constexpr int kOutputsPerWarp = kOutputsPerBlock / kWarps;
  static_assert(kOutputsPerWarp * kWarps == kOutputsPerBlock);
  const int lane = gpu::lane_id();
  const int64_t group = p.group_offset + blockIdx.y;
  const int64_t row0 = group * R;
  const int num_valid = static_cast<int>(min(static_cast<int64_t>(R), p.num_rows - row0));

  const uint8_t* w = p.w;
  const float* xs[R];
  if (p.expert_ids != nullptr) {  // R == 1: this pair's expert and input row
    w += static_cast<size_t>(p.expert_ids[group]) * p.expert_bytes;
    xs[0] = p.x + (group / p.pairs_per_x_row) * p.x_stride;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) xs[r] = p.x + (row0 + (r < num_valid ? r : 0)) * p.x_stride;
  }
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * kOutputsPerBlock + gpu::warp_id() * kOutputsPerWarp;
  const uint8_t* rows[kOutputsPerWarp];
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
    const int64_t o = min(out0 + i, p.num_out - 1);
    rows[i] = w + static_cast<size_t>(o) * p.w_row_bytes;
  }

  float acc[kOutputsPerWarp][R];
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;
  }
  const int64_t num_chunks = p.num_in / 8;  // every layout decodes 8 elements a chunk
  for (int64_t c = lane; c < num_chunks; c += kWarpSize) {
    float wv[kOutputsPerWarp][8];
    int64_t x0 = 0, x1 = 0;
#pragma unroll
    for (int i = 0; i < kOutputsPerWarp; ++i) D::decode(rows[i], c, wv[i], x0, x1);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 a = *reinterpret_cast<const float4*>(xs[r] + x0);
      const float4 b = *reinterpret_cast<const float4*>(xs[r] + x1);
      const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < kOutputsPerWarp; ++i) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][r] = fmaf(wv[i][e], xv[e], acc[i][r]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = gpu::warp_sum(acc[i][r]);
  }
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (out0 + i >= p.num_out || r >= num_valid) continue;
      const int64_t y_row = p.expert_ids != nullptr ? group : row0 + r;
      float* y = p.y + y_row * p.y_stride + out0 + i;
      *y = p.accumulate ? *y + acc[i][r] : acc[i][r];
    }
  }
}

template <class D, int R>
gpuError_t launch_groups(MatvecParams p, int64_t num_groups, gpuStream_t stream) {
  const unsigned grid_x = static_cast<unsigned>((p.num_out + kOutputsPerBlock - 1) / kOutputsPerBlock);
  for (int64_t first = 0; first < num_groups; first += kMaxGridY) {
    p.group_offset = first;
    const dim3 grid(grid_x, static_cast<unsigned>(num_groups - first < kMaxGridY ? num_groups - first : kMaxGridY));
    matvec_kernel<D, R><<<grid, kThreads, 0, stream>>>(p);
  }
  return gpuGetLastError();
}

template <class D>
gpuError_t launch_matvec(const MatvecParams& p, bool expert_mode, gpuStream_t stream) {
  if (expert_mode) return launch_groups<D, 1>(p, p.num_rows, stream);
  // Rows go in groups of R (a power of two); a row's arithmetic is the same for every R.
  const int64_t n = p.num_rows;
  if (n == 1) return launch_groups<D, 1>(p, 1, stream);
  if (n == 2) return launch_groups<D, 2>(p, 1, stream);
  if (n <= 4) return launch_groups<D, 4>(p, 1, stream);
  return launch_groups<D, kMaxRowsPerGroup>(p, (n + kMaxRowsPerGroup - 1) / kMaxRowsPerGroup, stream);
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

int64_t block_elements(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0: return 32;
    case DType::Q4_K:
    case DType::Q6_K: return 256;
    default: return 1;
  }
}

bool valid(const MatmulArgs& a) {
  const bool supported = a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16 ||
                         a.w_type == DType::Q8_0 || a.w_type == DType::Q4_0 || a.w_type == DType::Q4_K ||
                         a.w_type == DType::Q6_K;
  if (!supported || a.num_in <= 0 || a.num_in % 8 != 0 || a.num_in % block_elements(a.w_type) != 0) return false;
  if (!aligned16(a.x) || a.x_stride % 4 != 0) return false;
  const bool plain = a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16;
  if (plain && (!aligned16(a.w) || a.w_row_bytes % 16 != 0)) return false;
  if ((reinterpret_cast<uintptr_t>(a.w) & 1u) != 0 || a.w_row_bytes % 2 != 0) return false;
  return true;
}

gpuError_t dispatch(const MatvecParams& p, DType type, bool expert_mode, gpuStream_t stream) {
  switch (type) {
    case DType::F32: return launch_matvec<DecodeF32>(p, expert_mode, stream);
    case DType::F16: return launch_matvec<DecodeHalf<false>>(p, expert_mode, stream);
    case DType::BF16: return launch_matvec<DecodeHalf<true>>(p, expert_mode, stream);
    case DType::Q8_0: return launch_matvec<DecodeQ8_0>(p, expert_mode, stream);
    case DType::Q4_0: return launch_matvec<DecodeQ4_0>(p, expert_mode, stream);
    case DType::Q4_K: return launch_matvec<DecodeQ4_K>(p, expert_mode, stream);
    case DType::Q6_K: return launch_matvec<DecodeQ6_K>(p, expert_mode, stream);
    default: return gpuErrorInvalidValue;
  }
}

MatvecParams params_of(const MatmulArgs& a) {
  MatvecParams p{};
  p.w = static_cast<const uint8_t*>(a.w);
  p.w_row_bytes = a.w_row_bytes;
  p.num_in = a.num_in;
  p.num_out = a.num_out;
  p.x = a.x;
  p.x_stride = a.x_stride;
  p.y = a.y;
  p.y_stride = a.y_stride;
  p.num_rows = a.num_rows;
  p.accumulate = a.accumulate;
  p.pairs_per_x_row = 1;
  return p;
}

}  // namespace

gpuError_t matmul_gpu(const MatmulArgs& args, gpuStream_t stream) {
  if (!valid(args)) return gpuErrorInvalidValue;
  if (args.num_rows <= 0 || args.num_out <= 0) return gpuSuccess;
  return dispatch(params_of(args), args.w_type, false, stream);
}

gpuError_t matmul_experts_gpu(const MatmulExpertsArgs& args, gpuStream_t stream) {
  if (!valid(args.base) || args.expert_ids == nullptr || args.pairs_per_x_row <= 0) return gpuErrorInvalidValue;
  if (args.num_pairs <= 0 || args.base.num_out <= 0) return gpuSuccess;
  MatvecParams p = params_of(args.base);
  p.num_rows = args.num_pairs;
  p.expert_ids = args.expert_ids;
  p.expert_bytes = static_cast<size_t>(args.base.num_out) * args.base.w_row_bytes;
  p.pairs_per_x_row = args.pairs_per_x_row;
  return dispatch(p, args.base.w_type, true, stream);
}

}  // namespace deltaserve::kernels
