// The staged matvec's device walk (matmul_mma_staged.cu has the arithmetic and the launch
// rules): the shared-memory size of a block, the activation-row column tiles, and staged_group,
// one row group of a block's 16-row tile(s) from the first chunks' copies to the epilogue.
// Device code, included by matmul_mma_staged.cu only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/async_copy.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/matmul/matvec_seg.h"
#include "kernels/matmul/matvec_staged.h"
#include "kernels/gpu/mma_bf16.h"
#include "kernels/norm/norm_block.h"

namespace deltaserve::kernels::staged {

using matvec::MatvecParams;
using matvec::MatvecSeg;

// Stages (chunks in flight + 1) per block: 4, or fewer where launch_stages says why. Timing
// only: the arithmetic does not depend on it.
constexpr int kMaxStages = 4;

// Activation rows per group R: 3R columns in ceil(3R / 8) tiles of 8.
template <int R>
__host__ __device__ constexpr int column_tiles() {
  return (3 * R + 7) / 8;
}

// M: 16-row tiles per block (staged_group).
template <int R, int B, int S, int M>
__host__ __device__ constexpr size_t smem_bytes() {
  return static_cast<size_t>(S) * M * Chunk<B>::kStageBytes + static_cast<size_t>(R) * Chunk<B>::kSplitBytesPerRow;
}

#if defined(DS_MMA_BF16)
// Weight row of A row i (0..15) of tile `tile`: plain, output 16 tile + i; gated, output
// 8 tile + i % 8 of W (i < 8) or W_up. Clamped to the last output (loads stay in the matrix;
// such outputs are not written). expert: the byte offset of the pair's expert (0 otherwise).
__device__ __forceinline__ const uint8_t* tile_row(const MatvecSeg& g, size_t expert, int64_t tile, int i) {
  if (g.w_up != nullptr) {
    const int64_t out = min(tile * (kTileRows / 2) + (i & 7), g.num_out - 1);
    return (i < 8 ? g.w : g.w_up) + expert + static_cast<size_t>(out) * g.w_row_bytes;
  }
  const int64_t out = min(tile * kTileRows + i, g.num_out - 1);
  return g.w + expert + static_cast<size_t>(out) * g.w_row_bytes;
}

// The input norm's scale of each of the group's rows (pad rows: row 0's), rms_norm_gpu's bits:
// its block has 256 threads for rows of 256+ inputs, as this one (detail::block_inverse_rms_rows).
template <int R>
__device__ __forceinline__ void input_norm_scales(const MatvecSeg& g, int64_t x_row0, int num_valid, float (&scale)[R]) {
  static_assert(kThreads == detail::kNormMaxThreads, "the norm's thread count for rows of 256+ inputs");
  const float* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = g.x + (x_row0 + (r < num_valid ? r : 0)) * g.x_stride;
  detail::block_inverse_rms_rows<R, kWarps>(rows, g.num_in, g.in_norm_eps, scale);
}

// rms_norm_gpu's output for 4 consecutive inputs of a row (detail::rms_normed).
__device__ __forceinline__ float4 input_normed(float4 x, float scale, float4 w) {
  return make_float4(detail::rms_normed(x.x, scale, w.x), detail::rms_normed(x.y, scale, w.y), detail::rms_normed(x.z, scale, w.z),
                     detail::rms_normed(x.w, scale, w.w));
}

// One row group of the block's tile. Every thread of the block calls it (barriers inside).
// kInNorm: the segment's input norm (g.in_norm_w): x rows are residual rows, each activation
// item is normalised as it is split.
// M: the block's 16-row tiles (its x index covers tiles M x .. M x + M - 1), staged side by
// side and multiplied with the same activation loads; each row's walk is the one-tile one.
// early: the kernel has not waited yet (gpu::begin_kernel): the first chunks' weight copies
// go out first (weights: memory no kernel of the step writes; nothing else is read before the
// wait but kernel parameters), then the wait; never with expert segments, whose rows come from
// the router. early_tail_loads / alternate_halves: MatvecParams' pipelining values (always on;
// matvec_seg.h says why they are values).
template <int R, int B, int kStages, bool kNorm, bool kInNorm, int M, bool kDeferred>
__device__ __forceinline__ void staged_group(const MatvecSeg& g, int64_t group, uint8_t* smem, bool early, bool early_tail_loads,
                                             bool alternate_halves) {
  using C = Chunk<B>;
  constexpr int NT = column_tiles<R>();
  constexpr int kChunkBlocks = C::kBlocks, kChunkInputs = C::kInputs, kSegBytes = C::kSegBytes, kRowStride = C::kRowStride;
  constexpr int kBlockRows = M * kTileRows, kStageBytes = M * C::kStageBytes, kUnitsPerRow = C::kUnitsPerRow;
  constexpr int kCopiesPerThread = (kBlockRows * kUnitsPerRow + kThreads - 1) / kThreads;
  const int tid = static_cast<int>(threadIdx.x), lane = gpu::lane_id(), warp = gpu::warp_id();
  const int lane_group = lane >> 2, lane_quad = lane & 3;
  const int64_t row0 = group * R;
  const int num_valid = static_cast<int>(min(static_cast<int64_t>(R), g.num_rows - row0));
  const int64_t tile = (static_cast<int64_t>(blockIdx.x) - g.block_begin) * M;  // the block's first 16-row tile
  // Expert segments (R == 1): group = the pair, its expert's weights, its token's x row.
  const bool expert_pair = g.expert_ids != nullptr;
  const size_t expert = expert_pair ? static_cast<size_t>(g.expert_ids[group]) * g.expert_bytes : 0;
  const int64_t x_row0 = expert_pair ? group / g.pairs_per_x_row : row0;
  const int num_chunks = static_cast<int>(g.num_in / kChunkInputs);
  uint8_t* split = smem + kStages * kStageBytes;

  // This thread's 16-byte copies of a chunk: (weight row, unit) pairs fixed for the whole walk.
  // Copy j exists for every thread when the tile has (j + 1) * kThreads units, so only
  // the last ones test their source; the stages' shared-space base is converted once.
  constexpr int kUnits = kBlockRows * kUnitsPerRow;
  const uint8_t* src[kCopiesPerThread];
  unsigned dst[kCopiesPerThread];
#pragma unroll
  for (int j = 0; j < kCopiesPerThread; ++j) {
    const int u = tid + j * kThreads;
    const int r = u / kUnitsPerRow, unit = u - r * kUnitsPerRow;
    src[j] = u < kUnits ? tile_row(g, expert, tile + r / kTileRows, r % kTileRows) + 16 * unit : nullptr;
    dst[j] = static_cast<unsigned>(r * kRowStride + 16 * unit);
  }
  const gpu::SharedBase stages = gpu::shared_base(smem);
  auto issue = [&](int chunk) {
    const unsigned stage = static_cast<unsigned>((chunk % kStages) * kStageBytes);
#pragma unroll
    for (int j = 0; j < kCopiesPerThread; ++j) {
      if ((j + 1) * kThreads <= kUnits || src[j] != nullptr)  // the first test folds (unrolled j)
        gpu::async_copy16_at(stages, stage + dst[j], src[j] + static_cast<size_t>(chunk) * kSegBytes);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_chunks) issue(s);
    gpu::async_commit();
  }
  if (early) gpu::begin_kernel();

  // Lane (g, c) of column tile t holds column n = 8t + g: activation row n / 3, part n % 3.
  // 2-row groups load zeros past the parts (chunk_products_tiles' kZeroPast), the others any.
  constexpr bool kZeroPast = R == 2;
  int split_at[NT];  // the lane's uint4 in a chunk's split, block 0 (past the 3R columns: any, or -1)
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int n = 8 * t + lane_group;
    split_at[t] = n < 3 * R ? (((n / 3) * kChunkBlocks) * 3 + n % 3) * 4 + lane_quad : (kZeroPast ? -1 : staged::split_at_past(lane_quad));
  }
  float acc[M][NT][4];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[m][t][0] = acc[m][t][1] = acc[m][t][2] = acc[m][t][3] = 0.0f;
  }

  // A chunk's activations: item (row, block, quad c) = the 8 inputs lane quad c of an mma
  // reads (4c.., 16 + 4c..) of one row and block, split into its three parts' uint4 in shared
  // memory. Where a thread has one item a chunk, its item of chunk k + 1 is loaded into
  // registers while chunk k runs (the activations come from the previous kernel, an L2 round
  // trip each time); with more (4-8 rows of 1,024-input chunks) the registers would cost the
  // block its occupancy (136 per thread at 8 rows), so the items load just before their split.
  constexpr int kItemsPerChunk = R * kChunkBlocks * 4;
  constexpr bool kPipelineX = kItemsPerChunk <= kThreads;
  uint4* split4 = reinterpret_cast<uint4*>(split);
  // Item `item` of chunk `chunk`: its first input's offset in the row, and its row.
  auto item_input = [&](int item, int chunk) {
    const int b = (item / 4) % kChunkBlocks, c = item % 4;
    return static_cast<int64_t>(chunk) * kChunkInputs + 32 * b + 4 * c;
  };
  auto item_row = [&](int item) { return item / (kChunkBlocks * 4); };
  auto item_at = [&](int item, int chunk) {
    const int r = item_row(item);
    return g.x + (x_row0 + (r < num_valid ? r : 0)) * g.x_stride + item_input(item, chunk);
  };
  float in_scale[R];  // kInNorm: each row's scale (input_norm_scales, after the first loads go out)
#pragma unroll
  for (int r = 0; r < R; ++r) in_scale[r] = 1.0f;
  auto split_item = [&](int item, float4 xa, float4 xb, float4 wa, float4 wb) {
    const int r = item_row(item), b = (item / 4) % kChunkBlocks, c = item % 4;
    if constexpr (kInNorm) {
      xa = input_normed(xa, in_scale[r], wa);
      xb = input_normed(xb, in_scale[r], wb);
    }
    (void)wa, (void)wb;
    staged::split_quad(xa, xb, split4 + (r * kChunkBlocks + b) * 12 + c);
  };
  // kPipelineX: this thread's item of the next chunk (and its norm weights with kInNorm).
  // alternate (the deferred norm's kernels of one row, whose items fill at most half the
  // block): the block's two halves take alternate chunks, each loading its item of chunk k + 2
  // after splitting chunk k's, so each load has two chunks' time to arrive instead of one, in
  // the same registers and shared memory (Nsight Compute put the 27B's down and out
  // projections' largest stalls on that load and the barrier behind it). A second split buffer
  // instead (chunk k + 1 split during chunk k) was slower, with 6 KB more a block.
  const bool alternate = kDeferred && R == 1 && kPipelineX && 2 * kItemsPerChunk <= kThreads && alternate_halves;
  const int x_item = alternate ? tid % kItemsPerChunk : tid;  // this thread's item of a chunk
  const int x_half = alternate ? tid / kItemsPerChunk : 0;    // alternate: the chunks k with k % 2 == x_half (2+: none)
  float4 xa = make_float4(0.0f, 0.0f, 0.0f, 0.0f), xb = xa, wa = xa, wb = xa;
  auto load_x = [&](int chunk) {
    if (tid >= (alternate ? 2 : 1) * kItemsPerChunk) return;
    const float* at = item_at(x_item, chunk);
    xa = *reinterpret_cast<const float4*>(at);
    xb = *reinterpret_cast<const float4*>(at + 16);
    if constexpr (kInNorm) {
      const float* w = g.in_norm_w + item_input(x_item, chunk);
      wa = *reinterpret_cast<const float4*>(w);
      wb = *reinterpret_cast<const float4*>(w + 16);
    }
  };
  auto split_x = [&] {
    if (tid < (alternate ? 2 : 1) * kItemsPerChunk) split_item(x_item, xa, xb, wa, wb);
  };
  auto load_split_x = [&](int chunk) {
#pragma unroll 1
    for (int item = tid; item < kItemsPerChunk; item += kThreads) {
      const float* at = item_at(item, chunk);
      float4 na = make_float4(0.0f, 0.0f, 0.0f, 0.0f), nb = na;
      if constexpr (kInNorm) {
        const float* w = g.in_norm_w + item_input(item, chunk);
        na = *reinterpret_cast<const float4*>(w);
        nb = *reinterpret_cast<const float4*>(w + 16);
      }
      split_item(item, *reinterpret_cast<const float4*>(at), *reinterpret_cast<const float4*>(at + 16), na, nb);
    }
  };
  if constexpr (kPipelineX) {
    if (!alternate) load_x(0);
    else if (x_half < num_chunks) load_x(x_half);  // half 1: chunk 1's item, with half 0's of chunk 0
  }

  // Deferred norm (g.sq_in): this thread's share of each row's sum of the producer's tile
  // squares (tiles t, t + 256, ... added in order from 0), every load issued before the first
  // add (one round trip, not one per load: a rolled loop cost the 27B's 2- and 4-row steps
  // more than the norm launches it replaced); then, after the walk, a butterfly per warp.
  const bool deferred_in = kDeferred && g.sq_in != nullptr;
  float squares[R];
#pragma unroll
  for (int r = 0; r < R; ++r) squares[r] = 0.0f;
  auto load_squares = [&] {
    float v[R][matvec::kDeferredNormSquaresPerThread];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float* row = g.sq_in + (x_row0 + r) * g.sq_in_stride;
#pragma unroll
      for (int j = 0; j < matvec::kDeferredNormSquaresPerThread; ++j) {
        const int64_t i = tid + j * kThreads;
        v[r][j] = r < num_valid && i < g.sq_in_count ? row[i] : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int j = 0; j < matvec::kDeferredNormSquaresPerThread; ++j) squares[r] += v[r][j];  // + 0: exact
    }
  };

  // Tail loads before the walk (the deferred norm's one-tile kernels of 1-2 row groups): what a
  // producer's epilogue reads, the residual it adds to and the next norm's weights, and a
  // reader's tile sums go out here with chunk 0's activations, so their round trip overlaps the
  // walk instead of following it (Nsight Compute put a part of the 27B's down and out
  // projections' warp samples, one wave each, where every block's tail is the launch's, on the
  // epilogue's loads). Only these kernels: the others' machine code stays as it was (with every
  // kernel of 1-2 row groups on this path the 35B-A3B's steps were slower, and the two-tile
  // kernels, held to 80 registers, spilled more; bench/RESULTS.md).
  const bool early_tail = kDeferred && R <= 2 && M == 1 && early_tail_loads;
  float y_before = 0.0f, xw_weight = 0.0f;  // early_tail: the epilogue's residual and next-norm weight
  if (early_tail) {
    if (g.w_up == nullptr && tid < M * kTileRows * num_valid) {
      const int i = tid % kTileRows, m = (tid / kTileRows) % M, r = tid / (kTileRows * M);
      const int64_t out = (tile + m) * kTileRows + i;
      if (out < g.num_out) {
        if (g.accumulate) y_before = g.y[(row0 + r) * g.y_stride + out];
        if (g.sq_out != nullptr) xw_weight = g.xw_w[out];
      }
    }
    if (deferred_in) load_squares();
  }
  if constexpr (kInNorm) input_norm_scales<R>(g, x_row0, num_valid, in_scale);

  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    if (chunk + kStages - 1 < num_chunks) issue(chunk + kStages - 1);
    gpu::async_commit();
    if constexpr (kPipelineX) {
      if (!alternate) {
        split_x();  // this chunk's activations, loaded during the previous one
        if (chunk + 1 < num_chunks) load_x(chunk + 1);  // in flight through this chunk's wait and products
      } else if (x_half == (chunk & 1)) {
        split_x();  // this half's chunk: loaded two chunks ago
        if (chunk + 2 < num_chunks) load_x(chunk + 2);
      }
    } else {
      load_split_x(chunk);
    }
    gpu::async_wait<kStages - 1>();
    __syncthreads();
    staged::chunk_products_tiles<B, NT, M, kRowStride, kZeroPast>(smem + (chunk % kStages) * kStageBytes, split4, split_at, acc);
    __syncthreads();  // the stage and the split are rewritten next chunk
  }
  gpu::async_wait<0>();  // (only empty groups remain; no copy may land after the reuse below)

  if (!early_tail && deferred_in) load_squares();

  // The warps' sums, through the (now idle) stage and split memory: partial[warp][m][t][lane][4],
  // then (deferred norm) each warp's share of the squares, row_squares[warp][r].
  constexpr int kPartialFloats = kWarps * M * NT * 32 * 4;
  static_assert(sizeof(float) * (kPartialFloats + kWarps * R) <= smem_bytes<R, B, kStages, M>());
  float* partial = reinterpret_cast<float*>(smem);
  float* row_squares = partial + kPartialFloats;
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[(((warp * M + m) * NT + t) * 32 + lane) * 4 + e] = acc[m][t][e];
    }
  }
  if (deferred_in) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = gpu::warp_sum(squares[r]);
      if (lane == 0) row_squares[warp * R + r] = v;
    }
  }
  __syncthreads();
  // Row r's scale: the warps' shares added in warp order (every thread that asks gets the same bits).
  auto deferred_scale = [&](int r) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += row_squares[w * R + r];
    return 1.0f / sqrtf(total / static_cast<float>(g.num_in) + g.sq_eps);
  };
  // C[i][n] of column tile t of tile m: lane (i % 8) * 4 + (n % 8) / 2, element (i >= 8 ? 2 : 0) + n % 2.
  auto column_sum = [&](int m, int i, int n) {
    const int t = n / 8, c = n % 8;
    const int at = ((m * NT + t) * 32 + (i % 8) * 4 + c / 2) * 4 + (i >= 8 ? 2 : 0) + c % 2;
    float v = partial[at];
    for (int w = 1; w < kWarps; ++w) v += partial[w * M * NT * 128 + at];
    return v;
  };
  auto row_value = [&](int m, int i, int r) { return staged::parts_value([&](int p) { return column_sum(m, i, 3 * r + p); }); };
  const bool gated = g.w_up != nullptr;
  const int outputs = gated ? kTileRows / 2 : kTileRows;
  if constexpr (!kDeferred) {
    if (tid < M * outputs * num_valid) {
      const int i = tid % outputs, m = (tid / outputs) % M, r = tid / (outputs * M);
      float* y = g.y + (row0 + r) * g.y_stride;
      if (gated) {
        const int64_t out = (tile + m) * (kTileRows / 2) + i;
        // swiglu_gpu's expression, as the other matvec kernels' gated segments.
        const float gate = row_value(m, i, r);
        if (out < g.num_out) y[out] = gate / (1.0f + expf(-gate)) * row_value(m, i + 8, r);
      } else {
        const int64_t out = (tile + m) * kTileRows + i;
        if (out < g.num_out) {
          const float v = row_value(m, i, r);
          y[out] = g.accumulate ? y[out] + v : v;
        }
      }
    }
  } else {
    // The same, the readers' sums times the row's scale; the producer also writes x * w and its
    // y^2 (__fmul_rn: not contracted into the butterfly's first add).
    float square = 0.0f;
    if (tid < M * outputs * num_valid) {
      const int i = tid % outputs, m = (tid / outputs) % M, r = tid / (outputs * M);
      float* y = g.y + (row0 + r) * g.y_stride;
      const float scale = deferred_in ? deferred_scale(r) : 1.0f;
      if (gated) {
        const int64_t out = (tile + m) * (kTileRows / 2) + i;
        float gate = row_value(m, i, r), up = row_value(m, i + 8, r);
        if (deferred_in) gate *= scale, up *= scale;
        if (out < g.num_out) y[out] = gate / (1.0f + expf(-gate)) * up;
      } else {
        const int64_t out = (tile + m) * kTileRows + i;
        if (out < g.num_out) {
          float v = row_value(m, i, r);
          if (deferred_in) v *= scale;
          const float value = g.accumulate ? (early_tail ? y_before : y[out]) + v : v;
          y[out] = value;
          if (g.sq_out != nullptr) {
            g.xw_out[(row0 + r) * g.xw_stride + out] = __fmul_rn(value, early_tail ? xw_weight : g.xw_w[out]);
            square = __fmul_rn(value, value);
          }
        }
      }
    }
    // The producer: a plain tile's 16 outputs are 16 consecutive threads (one row and tile
    // each), whose squares a butterfly adds; its first thread writes the sum.
    if (g.sq_out != nullptr) {
      square = gpu::group_sum<kTileRows>(square);
      const int m = (tid / kTileRows) % M, r = tid / (kTileRows * M);
      if (tid % kTileRows == 0 && r < num_valid) g.sq_out[(row0 + r) * g.sq_out_stride + tile + m] = square;
    }
  }
  if constexpr (kNorm) {
    gpu::fence_acq_rel_device();  // the threads that wrote y: visible device-wide before the block counts itself done
    matvec::norm_epilogue(g, group, row0, num_valid, gridDim.x);
  }
  gpu::stamp_block_end();
}

// Asks L2 for the first kStages - 1 chunks of the tile's weight rows: the weights do not depend
// on the previous kernel, so their fetch may overlap its tail (gpu::prefetch_l2, the one access
// allowed before begin_kernel); the copies that follow the wait then hit L2.
template <int B, int kStages, int M>
__device__ __forceinline__ void prefetch_first_chunks(const MatvecSeg& g) {
  using C = Chunk<B>;
  constexpr int kLines = ((kStages - 1) * C::kSegBytes + 127) / 128 + 1;  // +1: a row need not start on a line
  const int64_t tile = (static_cast<int64_t>(blockIdx.x) - g.block_begin) * M;
  const int64_t bytes = min(static_cast<int64_t>(kStages - 1), g.num_in / C::kInputs) * C::kSegBytes;
  staged::prefetch_tile_rows([&](int r) { return tile_row(g, 0, tile + r / kTileRows, r % kTileRows); }, bytes, kLines, M * kTileRows);
}
#endif

// Block (x, y): x the segment's M 16-row tiles, y the row group of R activation rows.

}  // namespace deltaserve::kernels::staged
