// The staged Q4_0 matvec's arithmetic (matmul_mma_staged.cu, MatvecMath::kStaged) as pieces
// that other staged kernels call, so their products are its bits: the K walk's chunk
// geometry, one warp's products of a staged chunk, and the order in which a 16-row tile's
// warp sums and activation parts are added. The fused MoE down + combine kernel
// (moe_down_combine.cu) is the other user. Internal to kernels/; only for nvcc / hipcc
// translation units.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/mma_bf16.h"

namespace deltaserve::kernels::staged {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;  // weight rows per block: one mma's M

// The K walk: chunks of 8 * B Q4_0 blocks (B blocks per warp), B = 4 (1,024 inputs) for rows of
// a multiple of 1,024 inputs, else 1 (256). A row's 18 * 8 * B bytes of a chunk sit kRowStride
// apart in shared memory, an odd multiple of 4 words, so the 8 rows a lane quad reads start 4
// banks apart (576 + 16 bytes for B = 4; 144 for B = 1).
template <int B>
struct Chunk {
  static constexpr int kBlocks = 8 * B;
  static constexpr int kInputs = 32 * kBlocks;
  static constexpr int kSegBytes = 18 * kBlocks;
  static constexpr int kRowStride = kSegBytes + ((kSegBytes / 4) % 8 == 4 ? 0 : 4 * ((12 - (kSegBytes / 4) % 8) % 8));
  static constexpr int kStageBytes = kTileRows * kRowStride;
  static constexpr int kUnitsPerRow = kSegBytes / 16;  // 16-byte copies
  static constexpr int kCopiesPerThread = (kTileRows * kUnitsPerRow + kThreads - 1) / kThreads;
  static constexpr int kSplitBytesPerRow = kBlocks * 3 * 4 * 16;  // a chunk of one activation row, split
  static_assert(kSegBytes % 16 == 0 && kRowStride % 16 == 0 && (kRowStride / 4) % 8 == 4);
};

// B of a matrix with rows of num_in inputs (a multiple of 256): the shape alone decides it.
__host__ __device__ constexpr int chunk_blocks_per_warp(int64_t num_in) { return num_in % Chunk<4>::kInputs == 0 ? 4 : 1; }

#if defined(DS_MMA_BF16)
// Part p (0 hi, 1 mid, 2 lo) of a pair, from split_pair's parts.
__device__ __forceinline__ uint32_t part_of(const gpu::mma::SplitPair& s, int p) { return p == 0 ? s.hi : p == 1 ? s.mid : s.lo; }

// The activations lane quad c of an mma reads of one 32-input block (xa: inputs 4c .. 4c + 3,
// xb: 16 + 4c .. 16 + 4c + 3), split exactly into their bf16 parts: part p's uint4 goes to
// out[4 p] (the split layout: uint4 ((row, block) * 3 + p) * 4 + c).
__device__ __forceinline__ void split_quad(float4 xa, float4 xb, uint4* out) {
  const gpu::mma::SplitPair lo0 = gpu::mma::split_pair(xa.x, xa.y), lo1 = gpu::mma::split_pair(xa.z, xa.w);
  const gpu::mma::SplitPair hi0 = gpu::mma::split_pair(xb.x, xb.y), hi1 = gpu::mma::split_pair(xb.z, xb.w);
#pragma unroll
  for (int p = 0; p < 3; ++p) out[4 * p] = make_uint4(part_of(lo0, p), part_of(lo1, p), part_of(hi0, p), part_of(hi1, p));
}

// A lane's 4 qs bytes of block b in a staged row (at 18 b + 2 + 4 c from the row's start, rows
// 16-byte aligned): 4-byte aligned for odd b. With B even, b = B warp + j has j's parity, known
// once j is unrolled: odd blocks take one 32-bit load, even ones two 16-bit halves. Same bytes
// either way; measured even on top of the copies' shared base (bench/RESULTS.md).
template <int B>
__device__ __forceinline__ uint32_t qs_word_of(const uint8_t* p, int j) {
  if (B % 2 == 0 && j % 2 == 1) return *reinterpret_cast<const uint32_t*>(p);
  return gpu::load_u32_align2(p);
}

// split_at of a lane whose column n (of 3 R activation parts) is past them: its quad's uint4 of
// column 0 (chunk_products_tiles says why any will do).
__device__ __forceinline__ int split_at_past(int lane_quad) { return lane_quad; }

// One warp's products of a staged chunk: its blocks b = B warp + j (j < B, in order) of the 16
// rows in `stage` (block b of row i at i * kRowStride + 18 b - stage_shift), each two mma from
// zero (low nibbles, then high) and acc = fma(d, s, acc). split: the chunk's activations split
// in fragment order (uint4 (row, block, part, quad) as matmul_mma_staged.cu writes them, block
// b's at 12 b - split_shift); split_at[t]: this lane's uint4 of block 0 for column tile t. Lanes
// whose column is past the activation's parts take any uint4 of the split (split_at_past: their
// quad's of column 0): each mma column is its own dot product, so their columns hold sums that
// nobody reads, and the load needs neither a predicate nor zeroed registers (4 instructions a
// block in the one-row SASS, with an address recomputed each block). kZeroPast: the earlier
// form, split_at[t] = -1 past the parts and zeros loaded there; kept for the 2-row kernels,
// which measured slower at 2 streams without it (27B, bench/RESULTS.md) while the 1-,
// 4- and 8-row ones gained. The shifts let a warp stage only its own blocks; stage_shift is a
// multiple of 4 (qs_word_of's alignment).
// M: 16-row tiles staged one after another (tile m's rows from 16 m kRowStride on), each with
// its own acc[m]; they share the activation loads, and each row's arithmetic is the one-tile
// walk's, so a row's bits do not depend on M.
template <int B, int NT, int M, int kRowStride = Chunk<B>::kRowStride, bool kZeroPast = false>
__device__ __forceinline__ void chunk_products_tiles(const uint8_t* stage, const uint4* split, const int (&split_at)[NT],
                                                     float (&acc)[M][NT][4], int stage_shift = 0, int split_shift = 0) {
  const int lane = gpu::lane_id(), warp = gpu::warp_id();
  const int lane_group = lane >> 2, lane_quad = lane & 3;
  [[maybe_unused]] const uint4* b_at[NT];  // this lane's uint4 of the warp's first block, per column tile
  if constexpr (!kZeroPast) {
#pragma unroll
    for (int t = 0; t < NT; ++t) b_at[t] = split + split_at[t] + 12 * warp * B - split_shift;
  }
#pragma unroll
  for (int j = 0; j < B; ++j) {
    const int b = warp * B + j;
    float d_g[M], d_g8[M];
    gpu::mma::Q4_0Fragments a[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint8_t* bg = stage + (m * kTileRows + lane_group) * kRowStride + 18 * b - stage_shift;
      const uint8_t* bg8 = bg + 8 * kRowStride;
      d_g[m] = gpu::f16_bits_to_float(*reinterpret_cast<const uint16_t*>(bg));
      d_g8[m] = gpu::f16_bits_to_float(*reinterpret_cast<const uint16_t*>(bg8));
      a[m] = gpu::mma::q4_0_fragments<NT == 1>(qs_word_of<B>(bg + 2 + 4 * lane_quad, j), qs_word_of<B>(bg8 + 2 + 4 * lane_quad, j));
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      uint4 bx;
      if constexpr (kZeroPast) {
        bx = make_uint4(0u, 0u, 0u, 0u);
        if (split_at[t] >= 0) bx = split[split_at[t] + 12 * b - split_shift];
      } else {
        bx = b_at[t][12 * j];
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float s[4];
        gpu::mma::mma_bf16_from_zero(s, a[m].lo, bx.x, bx.y);
        gpu::mma::mma_bf16(s, a[m].hi, bx.z, bx.w);
        acc[m][t][0] = fmaf(d_g[m], s[0], acc[m][t][0]);
        acc[m][t][1] = fmaf(d_g[m], s[1], acc[m][t][1]);
        acc[m][t][2] = fmaf(d_g8[m], s[2], acc[m][t][2]);
        acc[m][t][3] = fmaf(d_g8[m], s[3], acc[m][t][3]);
      }
    }
  }
}

// The one-tile form (the fused MoE down + combine's).
template <int B, int NT, int kRowStride = Chunk<B>::kRowStride>
__device__ __forceinline__ void chunk_products(const uint8_t* stage, const uint4* split, const int (&split_at)[NT],
                                               float (&acc)[NT][4], int stage_shift = 0, int split_shift = 0) {
  chunk_products_tiles<B, NT, 1, kRowStride>(stage, split, split_at, reinterpret_cast<float(&)[1][NT][4]>(acc), stage_shift,
                                             split_shift);
}
#endif

// Asks L2 (gpu::prefetch_l2, the one access allowed before the grid dependency wait) for the
// first `bytes` of each of a block's `rows` weight rows (row_of(i), i < rows; a 16-row tile
// unless told), the block's threads striding over 128-byte lines; `lines`: lines a row's
// `bytes` may touch (+1 for a row that does not start on a line).
template <class RowOf>
__device__ __forceinline__ void prefetch_tile_rows(RowOf row_of, int64_t bytes, int lines, int rows = kTileRows) {
  for (int i = static_cast<int>(threadIdx.x); i < rows * lines; i += kThreads) {
    const uint8_t* row = row_of(i / lines);
    const uint8_t* at = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{127}) + 128 * (i % lines);
    if (at < row + bytes) gpu::prefetch_l2(at);
  }
}

// An output's value from its three part columns' sums (column_sum(p): the warps' sums of part p
// added in warp order): (lo + mid) + hi.
template <class ColumnSum>
__device__ __forceinline__ float parts_value(ColumnSum column_sum) {
  return (column_sum(2) + column_sum(1)) + column_sum(0);
}

// Lets `kernel` take `bytes` of dynamic shared memory (past the default 48 KB) on the calling
// thread's device, once per device (`done`: a bit per device). Not per launch: these calls
// would then also run inside decode graph capture.
template <class Kernel>
gpuError_t allow_dynamic_smem(Kernel kernel, size_t bytes, std::atomic<uint64_t>& done) {
#if defined(DS_GPU_CUDA)
  int device = 0;
  const cudaError_t got = cudaGetDevice(&device);
  if (got != cudaSuccess) return got;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return gpuSuccess;
  const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (set == cudaSuccess && bit != 0) done.fetch_or(bit, std::memory_order_release);
  return set;
#else
  (void)kernel, (void)bytes, (void)done;
  return gpuSuccess;
#endif
}

}  // namespace deltaserve::kernels::staged
