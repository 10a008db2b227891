// Expert-grouped tiled matmul (matmul_experts_prefill_gpu.h). Two launches (one when the
// caller passes plan_ready):
//
// plan_kernel, one block per expert e: thread t walks pairs [t * L, (t + 1) * L) (L =
// ceil(num_pairs / kPlanThreads)) and counts ids below e and ids equal to e; a block scan of
// the counts gives e's offset in the expert-sorted order (pairs routed to experts < e) and
// each thread's first position, and the thread writes its matching pairs in pair order:
// the scatter is stable and deterministic (no atomics). offsets[e] = that offset; the last
// block also writes offsets[num_experts] (valid pairs in all). The plan does not depend on
// the tile size, so one plan serves gate/up and down.
//
// tile slots (P pairs per tile, kTilePairsOf): expert e's tiles (ceil(count_e / P)) take the
// slots from start(e) = offsets[e] / P + e on. start() is strictly increasing and its tiles
// never reach start(e + 1) (floor(o / P) + ceil(c / P) <= floor((o + c) / P) + 1), and the
// last slot is below num_pairs / P + num_experts, so the grid is sized from host values alone
// and a slot finds its expert by a binary search over start(); slots between tiles exit.
//
// experts_tiled_kernel, block (output block, slot): gathers its tile's x rows, decodes the
// expert's weight tile once per P pairs (matmul_tile.h, the code of matmul_prefill_gpu: the
// same bits per element at any tile size) and writes y row p for each pair p of the tile.
// Gated: the block's 64 weight columns are 32 W rows and the same 32 W_up rows, so one staged
// x tile serves both sums; the epilogue reads both from the C tile and applies swiglu_gpu's
// expression.
#include "kernels/matmul/matmul_experts_prefill_gpu.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"
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

constexpr int kPlanThreads = 256;
constexpr int kThreads = gpu::kTileThreads;
constexpr int64_t kMaxGridY = 65535;
// Pairs per tile: an expert gets ~num_pairs * k / num_experts pairs per chunk (16 for 512
// rows of the 35B-A3B), so small tiles waste little; f32 keeps 32 (its thread tile needs 2
// rows per thread to stay ahead of shared-memory bandwidth), TF32 takes one mma row block.
// The exact tensor-core tile (Q4_0) takes 16 too, with 128 weight columns (kColsOf; the others
// 64): each staged and split activation window then serves twice the weight rows.
template <MatmulMath kMath>
inline constexpr int kTilePairsOf = gpu::tile_rows(kMath == MatmulMath::kF32 ? 32 : 16);
template <MatmulMath kMath>
inline constexpr int kColsOf = kMath == MatmulMath::kTensorExact ? gpu::kExactTileCols : gpu::kTileCols;
template <MatmulMath kMath>
inline constexpr int kCStrideOf = kColsOf<kMath> + 4;
static_assert(kCStrideOf<MatmulMath::kF32> == gpu::kTileCStride &&
              kCStrideOf<MatmulMath::kTensorExact> == gpu::ExactTile<16, gpu::kExactTileCols>::kCStride);

__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(const int32_t* ids, int64_t num_pairs, int32_t* offsets, int32_t* sorted) {
  gpu::begin_kernel();
  __shared__ int32_t below[kPlanThreads], mine[kPlanThreads];
  const int e = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t per_thread = (num_pairs + kPlanThreads - 1) / kPlanThreads;
  const int64_t begin = min(num_pairs, tid * per_thread), end = min(num_pairs, begin + per_thread);
  int32_t num_below = 0, num_mine = 0;
  for (int64_t p = begin; p < end; ++p) {
    const int32_t id = ids[p];
    num_below += (id >= 0 && id < e) ? 1 : 0;
    num_mine += id == e ? 1 : 0;
  }
  // Inclusive block scan of both counts (Hillis-Steele; integers, so any order is exact).
  below[tid] = num_below;
  mine[tid] = num_mine;
  __syncthreads();
  for (int d = 1; d < kPlanThreads; d <<= 1) {
    const int32_t b = tid >= d ? below[tid - d] : 0, m = tid >= d ? mine[tid - d] : 0;
    __syncthreads();
    below[tid] += b;
    mine[tid] += m;
    __syncthreads();
  }
  const int32_t offset = below[kPlanThreads - 1], count = mine[kPlanThreads - 1];
  if (tid == 0) {
    offsets[e] = offset;
    if (e == static_cast<int>(gridDim.x) - 1) offsets[e + 1] = offset + count;
  }
  if (num_mine == 0) return;
  int32_t pos = offset + mine[tid] - num_mine;
  for (int64_t p = begin; p < end; ++p) {
    if (ids[p] == e) sorted[pos++] = static_cast<int32_t>(p);
  }
}

struct TiledParams {
  const uint8_t* w;
  const uint8_t* w_up;  // gated when non-null
  size_t w_row_bytes;
  size_t expert_bytes;
  int64_t num_in;
  int64_t num_out;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int64_t pairs_per_x_row;
  bool accumulate;
  int32_t num_experts;
  const int32_t* offsets;  // [num_experts + 1]
  const int32_t* sorted;   // pairs by expert, then pair index
  int64_t slot_offset;     // first slot of this launch (grid.y limit)
  bool w_aligned16;        // w and w_up 16-byte aligned: raw weight copies by cp.async
};

// Slot -> (expert, first sorted index, pairs); false for a slot without a tile.
template <int kTilePairs>
__device__ __forceinline__ bool find_tile(const TiledParams& p, int64_t slot, int& expert, int32_t& first, int& num) {
  int lo = 0, hi = p.num_experts - 1;  // largest e with start(e) <= slot; start(0) == 0
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (static_cast<int64_t>(p.offsets[mid] / kTilePairs) + mid <= slot) lo = mid;
    else hi = mid - 1;
  }
  const int64_t t = slot - (p.offsets[lo] / kTilePairs + lo);
  const int64_t count = p.offsets[lo + 1] - p.offsets[lo];
  if (t * kTilePairs >= count) return false;
  expert = lo;
  first = p.offsets[lo] + static_cast<int32_t>(t * kTilePairs);
  num = static_cast<int>(min(static_cast<int64_t>(kTilePairs), count - t * kTilePairs));
  return true;
}

template <class D, int kTilePairs, MatmulMath kMath>
__global__ void __launch_bounds__(kThreads) experts_tiled_kernel(const TiledParams p) {
  gpu::begin_kernel();
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int32_t pair_of[kTilePairs];
  int expert = 0, num = 0;
  int32_t first = 0;
  if (!find_tile<kTilePairs>(p, p.slot_offset + blockIdx.y, expert, first, num)) return;  // uniform per block
  const int tid = static_cast<int>(threadIdx.x);
  const bool gated = p.w_up != nullptr;
  constexpr int kCols = kColsOf<kMath>, kCStride = kCStrideOf<kMath>;
  const int cols_per_block = gated ? kCols / 2 : kCols;
  const int64_t out0 = static_cast<int64_t>(blockIdx.x) * cols_per_block;
  if (tid < kTilePairs) pair_of[tid] = tid < num ? p.sorted[first + tid] : 0;
  __syncthreads();

  // Gated: the kCols weight columns are W rows out0.. (columns 0..kCols/2-1) and the same W_up
  // rows (the other half), so one staged x tile serves both sums.
  const size_t expert_base = static_cast<size_t>(expert) * p.expert_bytes;
  auto x_row_of = [&](int r) -> const float* { return r < num ? p.x + (pair_of[r] / p.pairs_per_x_row) * p.x_stride : nullptr; };
  auto w_row_of = [&](int c) -> const uint8_t* {
    const bool up_col = gated && c >= cols_per_block;
    const int64_t o = min(out0 + (up_col ? c - cols_per_block : c), p.num_out - 1);
    return (up_col ? p.w_up : p.w) + expert_base + static_cast<size_t>(o) * p.w_row_bytes;
  };
  const size_t stack_bytes = static_cast<size_t>(p.num_experts) * p.expert_bytes;
  const gpu::TileWeightEnds ends{p.w + stack_bytes, gated ? p.w_up + stack_bytes : p.w + stack_bytes,
                                 gated ? cols_per_block : kCols};
  if constexpr (kMath == MatmulMath::kTensorExact) {
    gpu::tile_run_exact<kTilePairs, kCols>(x_row_of, w_row_of, p.num_in, num, p.w_aligned16, ends, smem);
  } else {
    gpu::tile_run<D, kTilePairs, kMath == MatmulMath::kTf32>(x_row_of, w_row_of, p.num_in, num, p.w_aligned16, ends, smem);
  }

  // Coalesced epilogue over (pair, output); gated: swiglu_gpu's expression on the two sums,
  // bit-identical to the unfused pair.
  const float* c = gpu::tile_c(smem);
  for (int i = tid; i < kTilePairs * cols_per_block; i += kThreads) {
    const int r = i / cols_per_block, col = i % cols_per_block;
    const int64_t o = out0 + col;
    if (r >= num || o >= p.num_out) continue;
    float* y = p.y + static_cast<int64_t>(pair_of[r]) * p.y_stride + o;
    const float v = c[r * kCStride + col];
    if (gated) {
      *y = v / (1.0f + expf(-v)) * c[r * kCStride + cols_per_block + col];
    } else {
      *y = p.accumulate ? *y + v : v;
    }
  }
}

template <class D, MatmulMath kMath, int kTilePairs = kTilePairsOf<kMath>>
gpuError_t launch_math(TiledParams p, int64_t num_pairs, gpuStream_t stream) {
  const int64_t num_slots = num_pairs / kTilePairs + p.num_experts;  // see the slot note above
  constexpr size_t kSmemBytes =
      kMath == MatmulMath::kTensorExact ? gpu::tile_exact_smem_bytes<kTilePairs, kColsOf<kMath>>() : gpu::tile_smem_bytes<D, kTilePairs>();
#if defined(DS_GPU_CUDA)
  const cudaError_t err = cudaFuncSetAttribute(experts_tiled_kernel<D, kTilePairs, kMath>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (err != cudaSuccess) return err;
#endif
  const int64_t cols_per_block = p.w_up != nullptr ? kColsOf<kMath> / 2 : kColsOf<kMath>;
  const unsigned grid_x = static_cast<unsigned>((p.num_out + cols_per_block - 1) / cols_per_block);
  for (int64_t first = 0; first < num_slots; first += kMaxGridY) {
    p.slot_offset = first;
    const dim3 grid(grid_x, static_cast<unsigned>(num_slots - first < kMaxGridY ? num_slots - first : kMaxGridY));
    gpu::launch(experts_tiled_kernel<D, kTilePairs, kMath>, grid, kThreads, kSmemBytes, stream, p);
  }
  return gpuGetLastError();
}

// HIP has no TF32 or bf16 mma form: they run the f32 kernel there (one instantiation); so do
// kTensorExact for weights other than Q4_0 and devices without bf16 mma.
template <class D>
gpuError_t launch_tiled(const TiledParams& p, int64_t num_pairs, MatmulMath math, gpuStream_t stream) {
#if defined(DS_GPU_CUDA)
  if constexpr (std::is_same_v<D, DecodeQ4_0>) {
    if (math == MatmulMath::kTensorExact && tensor_exact_available()) {
      // Decode-sized calls (a few pairs per expert: 64 streams x top 8 over 256 experts) take
      // 8-pair tiles: half the tensor-core work and staging of 16 on pairs that are mostly
      // padding. Same bits either way (the tile height never changes an element's steps).
      constexpr int64_t kSmallTileMaxPairsPerExpert = 4;
      if (num_pairs <= kSmallTileMaxPairsPerExpert * p.num_experts)
        return launch_math<D, MatmulMath::kTensorExact, 8>(p, num_pairs, stream);
      return launch_math<D, MatmulMath::kTensorExact>(p, num_pairs, stream);
    }
  }
  if (math == MatmulMath::kTf32) return launch_math<D, MatmulMath::kTf32>(p, num_pairs, stream);
#else
  (void)math;
#endif
  return launch_math<D, MatmulMath::kF32>(p, num_pairs, stream);
}

bool plain_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// matmul_prefill_gpu's preconditions, for W and (gated) W_up.
bool valid_weights(const MatmulArgs& a, const void* w_up, bool gated) {
  int64_t block = 0;
  switch (a.w_type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: block = 8; break;
    case DType::Q8_0:
    case DType::Q4_0: block = 32; break;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: block = 256; break;
    default: return false;
  }
  if (a.num_in <= 0 || a.num_in % block != 0) return false;
  if (!gpu::aligned16(a.x) || a.x_stride % 4 != 0 || a.w_row_bytes % 2 != 0) return false;
  const size_t align = plain_type(a.w_type) ? 16 : 2;
  if (plain_type(a.w_type) && a.w_row_bytes % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(a.w) % align != 0) return false;
  return !gated || (w_up != nullptr && reinterpret_cast<uintptr_t>(w_up) % align == 0 && !a.accumulate);
}

size_t offsets_bytes(int64_t num_experts) { return (static_cast<size_t>(num_experts + 1) * sizeof(int32_t) + 15) / 16 * 16; }

}  // namespace

size_t matmul_experts_prefill_workspace_bytes(int64_t num_pairs, int64_t num_experts) {
  if (num_pairs < 0 || num_experts < 1) return 0;
  return offsets_bytes(num_experts) + static_cast<size_t>(num_pairs) * sizeof(int32_t);
}

gpuError_t matmul_experts_prefill_gpu(const MatmulExpertsPrefillArgs& args, gpuStream_t stream) {
  const MatmulArgs& a = args.experts.base;
  const int64_t num_pairs = args.experts.num_pairs, num_experts = args.num_experts;
  const bool gated = args.w_up != nullptr;
  if (!valid_weights(a, args.w_up, gated) || args.experts.expert_ids == nullptr || args.workspace == nullptr ||
      reinterpret_cast<uintptr_t>(args.workspace) % 4 != 0 || num_experts < 1 || num_experts >= (int64_t{1} << 31) ||
      num_pairs < 0 || num_pairs >= (int64_t{1} << 31) || args.experts.pairs_per_x_row < 1)
    return gpuErrorInvalidValue;
  if (num_pairs == 0 || a.num_out <= 0) return gpuSuccess;

  int32_t* offsets = static_cast<int32_t*>(args.workspace);
  int32_t* sorted = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(args.workspace) + offsets_bytes(num_experts));
  if (!args.plan_ready) {
    gpu::launch(plan_kernel, static_cast<unsigned>(num_experts), kPlanThreads, 0, stream, args.experts.expert_ids,
                num_pairs, offsets, sorted);
    const gpuError_t err = gpuGetLastError();
    if (err != gpuSuccess) return err;
  }

  TiledParams p{};
  p.w = static_cast<const uint8_t*>(a.w);
  p.w_up = static_cast<const uint8_t*>(args.w_up);
  p.w_row_bytes = a.w_row_bytes;
  p.expert_bytes = static_cast<size_t>(a.num_out) * a.w_row_bytes;
  p.num_in = a.num_in;
  p.num_out = a.num_out;
  p.x = a.x;
  p.x_stride = a.x_stride;
  p.y = a.y;
  p.y_stride = a.y_stride;
  p.pairs_per_x_row = args.experts.pairs_per_x_row;
  p.accumulate = a.accumulate;
  p.num_experts = static_cast<int32_t>(num_experts);
  p.offsets = offsets;
  p.sorted = sorted;
  p.w_aligned16 = gpu::aligned16(p.w) && (!gated || gpu::aligned16(p.w_up));
  switch (a.w_type) {
    case DType::F32: return launch_tiled<DecodeF32>(p, num_pairs, args.math, stream);
    case DType::F16: return launch_tiled<DecodeHalf<false>>(p, num_pairs, args.math, stream);
    case DType::BF16: return launch_tiled<DecodeHalf<true>>(p, num_pairs, args.math, stream);
    case DType::Q8_0: return launch_tiled<DecodeQ8_0>(p, num_pairs, args.math, stream);
    case DType::Q4_0: return launch_tiled<DecodeQ4_0>(p, num_pairs, args.math, stream);
    case DType::Q4_K: return launch_tiled<DecodeQ4_K>(p, num_pairs, args.math, stream);
    case DType::Q5_K: return launch_tiled<DecodeQ5_K>(p, num_pairs, args.math, stream);
    case DType::Q6_K: return launch_tiled<DecodeQ6_K>(p, num_pairs, args.math, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace deltaserve::kernels
