// The parameter block of the decode matvec launches (matmul_gpu.h's matrix-vector forms),
// shared by the CUDA-core kernels (matmul.cu) and the tensor-core Q4_0 kernel
// (matmul_mma.cu), with the pieces both run the same way: the block's segment and the norm
// epilogue. Internal to kernels/; only for nvcc / hipcc translation units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/norm/norm_block.h"

namespace deltaserve::kernels::matvec {

// One weight matrix of a launch. Blocks [block_begin, next segment's block_begin) of grid.x
// serve it; groups past num_groups exit at once (segments may have different row counts).
struct MatvecSeg {
  const uint8_t* w;
  const uint8_t* w_up;        // gated: y = SiLU(W x) * (W_up x); null otherwise
  size_t w_row_bytes;
  int64_t num_in;
  int64_t num_out;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int64_t num_rows;           // rows of y (pairs in expert mode)
  int64_t num_groups;         // ceil(num_rows / R)
  int64_t block_begin;
  const int32_t* expert_ids;  // expert mode (R == 1) when non-null and group_pairs null
  size_t expert_bytes;
  // Expert-grouped mode (group_pairs non-null): group g = pairs group_pairs[g][0, R) of
  // expert group_expert[g]; *group_count groups, walked with a grid-y stride.
  const int32_t* group_expert;
  const int32_t* group_pairs;
  const int32_t* group_count;
  int group_rows;
  int64_t pairs_per_x_row;
  bool accumulate;
  int mma_k_slices;           // tensor-core launch (matmul_mma.cu): K slices per 16-row tile, 4 or 8
  const void* x_split;        // tensor-core launch: x's pre-split bf16 parts, or null (matmul_mma.cu)
  // Norm epilogue (matmul_norm_gpu; single plain segment): norm_counters non-null.
  const float* norm_w;
  float norm_eps;
  float* norm_out;
  int64_t norm_out_stride;
  unsigned* norm_counters;    // [num_groups], zero between launches
  // Input norm (staged launches only): x rows are residual rows, the product's input is
  // rms_norm_gpu's RMSNorm(x row) * in_norm_w (matmul_gpu.h, MatmulSegment::input_norm_w).
  const float* in_norm_w;
  float in_norm_eps;
  // Deferred norm (staged launches only; matmul_gpu.h, MatmulSegment::norm_partials and
  // deferred_norm). Producer (sq_out set; one plain segment): besides y, the block writes
  // xw_out[row][o] = y[row][o] * xw_w[o] and, per 16-output tile t, sq_out[row][t] = the
  // tile's sum of y^2. Consumer (sq_in set): x rows are such xw rows; the products are
  // multiplied by 1 / sqrt(sum of the row's sq_in_count tile sums / num_in + sq_eps).
  const float* xw_w;
  float* xw_out;
  int64_t xw_stride;
  float* sq_out;
  int64_t sq_out_stride;
  const float* sq_in;
  int64_t sq_in_stride;
  int64_t sq_in_count;
  float sq_eps;
};

// A deferred norm's readers (MatvecSeg::sq_in, the staged launch): each of the block's 256
// threads loads at most this many of a row's tile sums of squares: kDeferredNormMaxInputs
// (matmul_gpu.h) follows from it.
inline constexpr int kDeferredNormSquaresPerThread = 4;
static_assert(kDeferredNormMaxInputs == int64_t{16} * 256 * kDeferredNormSquaresPerThread);

// Largest matrix (one segment; one expert) whose rows the matvec prefetches: the prefetch made
// the 35B-A3B's batch-1 step faster (matrices <= 9.4 MB, and the expert slices) but the 27B's
// slower (matrices of 18-100 MB), also when only the first wave of blocks prefetched
// (bench/RESULTS.md).
inline constexpr size_t kPrefetchMaxMatrixBytes = size_t{16} << 20;

constexpr int kMaxSegs = kMaxMatmulSegments;
struct MatvecParams {
  MatvecSeg seg[kMaxSegs];
  int num_segs;
  int64_t group_offset;  // first row group of this launch (grid.y limit)
  bool prefetch_weights;  // prefetch_block_weights: the launcher's rule by rows and matrix bytes
  // The staged walk's pipelining (matvec_staged_group.h): the first chunks' weight copies before
  // the grid dependency wait; the deferred norm's one-tile kernels' tail loads before the walk;
  // its one-row kernels' halves loading alternate chunks. Always on, yet kernel parameters rather
  // than compile-time constants on purpose: with constants, ptxas allocates the deferred-norm
  // kernels' registers differently (the two-tile ones spill) and the 27B's one-stream step was
  // 1.5% slower; with values the staged kernels are, byte for byte, the machine code those
  // figures were measured with (bench/RESULTS.md, decision log).
  bool copies_before_wait;
  bool early_tail_loads;
  bool alternate_halves;
};

// This block's segment, selected with constant indices (a run-time index into the parameter
// struct would copy it to local memory).
__device__ __forceinline__ MatvecSeg segment_of(const MatvecParams& p) {
  MatvecSeg g = p.seg[0];
#pragma unroll
  for (int s = 1; s < kMaxSegs; ++s) {
    if (s < p.num_segs && static_cast<int64_t>(blockIdx.x) >= p.seg[s].block_begin) g = p.seg[s];
  }
  return g;
}

// The norm epilogue: every block of row group `group` counts itself done after its y writes;
// the last one (all of the group's outputs written) normalises the group's rows into
// norm_out and resets the group's counter for the next launch (graph replays included).
__device__ inline void norm_epilogue(const MatvecSeg& g, int64_t group, int64_t row0, int num_valid, int64_t blocks_per_group) {
  __shared__ unsigned last;
  __shared__ float scratch[detail::kNormMaxThreads / gpu::kWarpSize];
  if (gpu::lane_id() == 0) gpu::fence_acq_rel_device();  // the lanes that wrote y: visible device-wide before the count
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(g.norm_counters + group, 1u) == static_cast<unsigned>(blocks_per_group - 1);
  __syncthreads();
  if (!last) return;
  gpu::fence_acq_rel_device();
  for (int r = 0; r < num_valid; ++r) {
    detail::block_rms_norm_as_norm_gpu(g.y + (row0 + r) * g.y_stride, g.norm_w, g.norm_out + (row0 + r) * g.norm_out_stride,
                                       g.num_out, g.norm_eps, scratch);
  }
  if (threadIdx.x == 0) g.norm_counters[group] = 0;
}

// Asks L2 for the block's weight rows [first, first + count) of w (and of w_up when gated),
// so the chunk walk's loads, each a round trip the lane waits for, hit L2 instead of HBM.
// Plain segments call it before the grid dependency wait (gpu::prefetch_l2), so the fetch
// overlaps the previous kernel's tail; expert segments after it, once the expert ids are
// visible. With dependent launches it shortens the few-stream steps; it is slower on large
// matrices and at 64 streams, hence the limits in the launchers (kPrefetchMaxMatrixBytes;
// bench/RESULTS.md).
// w / w_up: the segment's matrices, or for an expert segment this pair's expert's;
// rows_per_block: the weight rows each block walks (a gated block's outputs are half of them:
// one W row and one W_up row each).
__device__ __forceinline__ void prefetch_block_weights(const MatvecSeg& g, const uint8_t* w, const uint8_t* w_up,
                                                       int64_t rows_per_block) {
  const int64_t per_block = w_up != nullptr ? rows_per_block / 2 : rows_per_block;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) - g.block_begin) * per_block;
  const int64_t count = min(first + per_block, g.num_out) - first;
  if (count <= 0) return;
  const size_t offset = static_cast<size_t>(first) * g.w_row_bytes, bytes = static_cast<size_t>(count) * g.w_row_bytes;
  gpu::prefetch_l2_range(w + offset, bytes);
  if (w_up != nullptr) gpu::prefetch_l2_range(w_up + offset, bytes);
}

// 16-weight-row tiles of a segment for the tensor-core launches (one mma's M): 16 outputs
// each, or 8 when gated (their W and W_up rows).
inline int64_t mma_row_tiles(const MatvecSeg& g) {
  const int64_t per_tile = g.w_up != nullptr ? 8 : 16;
  return (g.num_out + per_tile - 1) / per_tile;
}

// Multiprocessors of the device (the first caller's, asked once; matmul_mma.cu): the
// tensor-core and staged launchers size their grids by it.
int multiprocessors();

// The tensor-core Q4_0 launch (matmul_mma.cu) of plain segments (gated and norm epilogue
// included; no expert segments), for MatvecMath::kTensorCores; context's pre-split scratch and
// launch counter.
gpuError_t launch_q4_0_mma(const MatvecParams& p, const MatvecContext& context, gpuStream_t stream);

// The staged tensor-core Q4_0 launch (matmul_mma_staged.cu) for MatvecMath::kStaged, when
// staged_shapes(p) holds: no expert-grouped segment, every matrix's rows a multiple of 256
// inputs (all of 1,024 or none) and 16-byte aligned. The rule reads the launch's matrices only,
// so a matrix in the same launch always takes the same kernel and K walk whatever the rows.
bool staged_shapes(const MatvecParams& p);
gpuError_t launch_q4_0_staged(const MatvecParams& p, StagedTiles tiles, gpuStream_t stream);

}  // namespace deltaserve::kernels::matvec
