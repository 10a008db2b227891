// Q4_0 matrix-vector products for a few activation rows (matmul_gpu.h, MatvecMath::kStaged):
// the weights staged in shared memory by cp.async, exact products on bf16 tensor cores with
// the activations' parts in the mma's columns. The launches of plain, gated, norm-epilogue and
// per-pair expert segments whose rows are multiples of 256 inputs (matvec::staged_shapes;
// others, and launches with expert-grouped segments, stay on the CUDA cores).
//
// Why (bench/probes/q4_0_staged_probe.cu, bench/RESULTS.md): at one activation row the f32
// chain of the CUDA-core kernel (matmul.cu) is bound by its ~130 instructions per 32 weights,
// not by the bytes (the 27B's gate matrix at 1.38 TB/s, a plain read of it at 3.7). On tensor
// cores a 16-row x 32-input block is two mma.sync plus the nibbles' conversion, and with the
// activation's three bf16 parts in columns 0-2 of one 8-column tile (instead of chained along
// K as in matmul_mma.cu) a row costs two mma per block, not six.
//
// Arithmetic (every output): an f32 activation is split exactly into bf16 parts hi + mid + lo
// (mma::split_pair); column 3r + p of the mma holds part p of activation row r (p = 0 hi, 1 mid,
// 2 lo), so the tensor core forms exact products of the integers q - 8 with each part. Per
// 32-input block: s = mma(low nibbles) then mma(high nibbles) from zero, acc = fma(d, s, acc).
// Warp w of 8 takes blocks Bw .. Bw + B - 1 of every chunk of 8B blocks (Layout), in chunk
// order; the warps' sums are added in warp order, then a row's parts as (lo + mid) + hi.
// Nothing in it depends on how many rows share the launch (a row's columns are 3r..3r+2
// whatever the group, and each mma column is its own dot product), so results are
// batch-invariant; they are not the bits of kCudaCores or kTensorCores (all ~1e-14 NMSE
// against matmul_ref).
//
// Layout. A block owns a tile of 16 weight rows (plain: 16 outputs; gated: 8 outputs, W rows
// in A rows 0-7, W_up rows in 8-15), or two such tiles side by side (StagedTiles, the same
// walk per tile sharing the activation loads), and one group of up to 8 activation rows
// (grid.y). It walks
// K in chunks of 8 * B Q4_0 blocks (Chunk: B = 4, 576 bytes of each row, for rows of a multiple
// of 1,024 inputs; else B = 1), up to 4 chunks in flight; each row's bytes land an odd multiple
// of 4 words apart so the lanes of a quad reading 8 rows never share a bank (4-way conflicts
// otherwise: 27B qkv 22.4 -> 18.7 us in the probe). Each chunk's activations are split once per
// block into shared memory in fragment order. Warp w takes blocks B w .. B w + B - 1 of every
// chunk, so B is part of the arithmetic: it follows the matrix's shape only.
//
// Input norm (MatmulSegment::input_norm_w): x rows are residual rows; every block first works
// out its rows' RMSNorm scales in rms_norm_gpu's order (input_norm_scales) while chunk 0's
// activations are in flight, then normalises each activation item as it splits it, so the
// products see rms_norm_gpu's output bit for bit without a norm launch before them.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kernels/async_copy.h"
#include "kernels/gpu_compat.h"
#include "kernels/matmul_gpu.h"
#include "kernels/matvec_seg.h"
#include "kernels/matvec_staged.h"
#include "kernels/mma_bf16.h"
#include "kernels/norm_block.h"

namespace deltaserve::kernels {
namespace {

using matvec::MatvecParams;
using matvec::MatvecSeg;

using staged::Chunk;
using staged::kThreads;
using staged::kTileRows;
using staged::kWarps;

// Stages (chunks in flight + 1) per block: 4, or fewer where launch_stages says why. Timing
// only: the arithmetic does not depend on it.
constexpr int kMaxStages = 4;
constexpr int64_t kMaxGridY = 65535;

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
// the router. early_tail_loads: a deferred norm kernel of 1-2 row groups loads its tail's
// inputs before the walk (StagedTailLoads, matmul_gpu.h); alternate_halves: a deferred norm
// kernel of one row loads each chunk's activations two chunks ahead (StagedActivationLoads);
// the same bits either way.
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
  // alternate (StagedActivationLoads; the deferred norm's kernels of one row, whose items fill
  // at most half the block): the block's two halves take alternate chunks, each loading its
  // item of chunk k + 2 after splitting chunk k's, so each load has two chunks' time to arrive
  // instead of one, in the same registers and shared memory. Nsight Compute's warp samples of
  // the 27B's down and out projections: ~7-11% waiting on the load at its conversion, and the
  // barrier behind it the largest stall (H200: 27B one stream 6.71 -> 6.62 ms, bench/RESULTS.md).
  // A second split buffer instead (chunk k + 1 split during chunk k) was slower: 6.98 ms; its
  // 6 KB more a block.
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

  // Tail loads before the walk (the deferred norm's one-tile kernels of 1-2 row groups, when the
  // launch asks: StagedTailLoads, matmul_gpu.h): what a producer's epilogue reads, the residual
  // it adds to and the next norm's weights, and a reader's tile sums go out here with chunk 0's
  // activations, so their round trip overlaps the walk instead of following it. Nsight Compute
  // put ~5% of the 27B's one-tile launches' warp samples (its down and out projections, one
  // wave each, where every block's tail is the launch's) on the epilogue's loads. Only these
  // kernels: the others' machine code stays as it was (with every kernel of 1-2 row groups on
  // this path the 35B-A3B's one- and 16-stream steps were 1-2% slower, and the two-tile
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
#if defined(DS_MMA_BF16)
// Groups of up to 4 rows: a launch of one segment (most) takes it whole, without segment_of's
// selection over every segment's fields (predicated uniform loads and selects that every warp
// of every block ran). H200 (bench/RESULTS.md): 35B-A3B one stream 2.777 -> 2.722 ms, two
// streams 3.40 -> 3.34, 27B one stream 8.65 -> 8.55; but 8-16 rows 0.3-1% slower, so 8-row
// groups keep the selection alone (their machine code is unchanged).
template <int R>
__device__ __forceinline__ MatvecSeg block_segment(const MatvecParams& p) {
  return R <= 4 && p.num_segs == 1 ? p.seg[0] : matvec::segment_of(p);
}
#endif

// Each kernel: the block's segment and row group (kernel parameters only), then either its
// first chunks' copies into shared memory, the grid dependency wait and the walk, all in
// staged_group (copies_before_wait), or (an expert segment's rows are known only after the
// wait: its expert ids come from the router; or the copies turned off) the L2 prefetch of its
// first chunks, the wait, then the walk.
template <int R, int B, int S, bool kNorm, bool kInNorm, bool kDeferred>
__global__ void __launch_bounds__(kThreads) matvec_staged_kernel(const MatvecParams p) {
#if defined(DS_MMA_BF16)
  extern __shared__ __align__(16) uint8_t smem[];
  const MatvecSeg g = block_segment<R>(p);
  const int64_t group = p.group_offset + blockIdx.y;
  // copies_before_wait: the weights' first copies (a prefetch into shared memory) go out in
  // staged_group before its wait.
  const bool early = p.copies_before_wait && group < g.num_groups && g.expert_ids == nullptr;
  if (!early) {
    if (p.prefetch_weights && group < g.num_groups && g.expert_ids == nullptr) prefetch_first_chunks<B, S, 1>(g);
    gpu::begin_kernel();
    if (group >= g.num_groups) return;
  }
  staged_group<R, B, S, kNorm, kInNorm, 1, kDeferred>(g, group, smem, early, p.early_tail_loads, p.alternate_halves);
#else
  gpu::begin_kernel();
  (void)p;  // never launched there: matvec_math() is kCudaCores without bf16 mma
#endif
}

// Two tiles a block: held to the registers of 3 blocks a multiprocessor (ptxas took 74-99
// unbounded: 2). Its body is the one-tile kernel's with M = 2, spelled out: the launch bounds
// differ (an explicit bound of one block on the one-tile kernel raised its registers, RESULTS),
// and the launch-rule check reads each kernel's own body for the wait.
constexpr int kTilesMinBlocks = 3;
template <int R, int B, int S, bool kNorm, bool kInNorm, bool kDeferred>
__global__ void __launch_bounds__(kThreads, kTilesMinBlocks) matvec_staged_tiles_kernel(const MatvecParams p) {
#if defined(DS_MMA_BF16)
  extern __shared__ __align__(16) uint8_t smem[];
  const MatvecSeg g = block_segment<R>(p);
  const int64_t group = p.group_offset + blockIdx.y;
  // copies_before_wait: the weights' first copies (a prefetch into shared memory) go out in
  // staged_group before its wait.
  const bool early = p.copies_before_wait && group < g.num_groups && g.expert_ids == nullptr;
  if (!early) {
    if (p.prefetch_weights && group < g.num_groups && g.expert_ids == nullptr) prefetch_first_chunks<B, S, 2>(g);
    gpu::begin_kernel();
    if (group >= g.num_groups) return;
  }
  staged_group<R, B, S, kNorm, kInNorm, 2, kDeferred>(g, group, smem, early, p.early_tail_loads, p.alternate_halves);
#else
  gpu::begin_kernel();
  (void)p;
#endif
}

template <int R, int B, int S, bool kNorm, bool kInNorm, int M, bool kDeferred>
constexpr auto staged_kernel() {
  static_assert(M == 1 || M == 2);
  if constexpr (M == 1) return matvec_staged_kernel<R, B, S, kNorm, kInNorm, kDeferred>;
  else return matvec_staged_tiles_kernel<R, B, S, kNorm, kInNorm, kDeferred>;
}

// Launches whose largest matrix is at most this many bytes prefetch their first chunks into L2
// before the grid dependency wait: matvec::kPrefetchMaxMatrixBytes, as the other matvec
// launchers. Measured on the H200 (bench/RESULTS.md), prefetching every launch against this
// line: 27B one stream 8.33 vs 8.14 ms, four streams 14.50 vs 14.28 (its 18-100 MB matrices),
// 35B-A3B one stream even (its largest, the LM head, no longer prefetches).
// DELTASERVE_GPU_STAGED_PREFETCH_MAX_MB=N moves the line (side-by-side runs).
size_t staged_prefetch_max_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("DELTASERVE_GPU_STAGED_PREFETCH_MAX_MB");
    return env != nullptr && *env != '\0' ? static_cast<size_t>(std::atoll(env)) << 20 : matvec::kPrefetchMaxMatrixBytes;
  }();
  return bytes;
}

// The blocks' first kStages - 1 chunks of weight copies go out before the grid dependency wait
// (staged_group's early; launches without expert segments), so the blocks that start while the
// previous kernel drains have their first chunks in shared memory when it ends, instead of
// asking for them then. H200 (bench/RESULTS.md, same bits): 27B one stream 7.67 -> 7.08 ms
// (130 -> 141 tok/s), two streams 8.74 -> 8.19, four 14.09 -> 13.72; 35B-A3B one stream 2.38 ->
// 2.31, 16 streams 12.45 -> 12.31. DELTASERVE_GPU_STAGED_EARLY=0: after the wait, as before
// (side-by-side runs).
bool copies_before_wait() {
  static const bool enabled = [] {
    const char* env = std::getenv("DELTASERVE_GPU_STAGED_EARLY");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return enabled;
}

template <int R, int B, int S, bool kNorm, bool kInNorm, int M, bool kDeferred>
gpuError_t launch_staged(MatvecParams p, gpuStream_t stream) {
  constexpr size_t kSmem = smem_bytes<R, B, S, M>();
  static std::atomic<uint64_t> smem_allowed{0};
  const gpuError_t allowed = staged::allow_dynamic_smem(staged_kernel<R, B, S, kNorm, kInNorm, M, kDeferred>(), kSmem, smem_allowed);
  if (allowed != gpuSuccess) return allowed;
  int64_t grid_x = 0, num_groups = 0;
  for (int s = 0; s < p.num_segs; ++s) {
    MatvecSeg& g = p.seg[s];
    g.num_groups = (g.num_rows + R - 1) / R;
    g.block_begin = grid_x;
    static_assert(kTileRows == 16);
    grid_x += (matvec::mma_row_tiles(g) + M - 1) / M;
    num_groups = g.num_groups > num_groups ? g.num_groups : num_groups;
  }
  // L2 prefetch of the first chunks before the grid dependency wait, for launches whose
  // largest matrix is at most staged_prefetch_max_bytes().
  size_t largest = 0;
  for (int s = 0; s < p.num_segs; ++s) {
    const MatvecSeg& g = p.seg[s];
    largest = std::max(largest, static_cast<size_t>(g.num_out) * g.w_row_bytes * (g.w_up != nullptr ? 2 : 1));
  }
  p.prefetch_weights = gpu::prefetch_enabled() && largest <= staged_prefetch_max_bytes();
  p.copies_before_wait = copies_before_wait();
  p.early_tail_loads = staged_tail_loads() == StagedTailLoads::kEarly;
  p.alternate_halves = staged_activation_loads() == StagedActivationLoads::kAlternateHalves;
  for (int64_t first = 0; first < num_groups; first += kMaxGridY) {
    p.group_offset = first;
    const dim3 grid(static_cast<unsigned>(grid_x),
                    static_cast<unsigned>(num_groups - first < kMaxGridY ? num_groups - first : kMaxGridY));
    gpu::launch(staged_kernel<R, B, S, kNorm, kInNorm, M, kDeferred>(), grid, kThreads, kSmem, stream, p);
  }
  return gpuGetLastError();
}

// The launch's largest segment's rows, and whether it has expert segments.
struct LaunchRows {
  int64_t rows = 0;
  bool experts = false;
};
LaunchRows launch_rows_of(const MatvecParams& p) {
  LaunchRows l;
  for (int s = 0; s < p.num_segs; ++s) {
    l.rows = p.seg[s].num_rows > l.rows ? p.seg[s].num_rows : l.rows;
    l.experts = l.experts || p.seg[s].expert_ids != nullptr;
  }
  return l;
}

// One tile a block. Rows per group R from the launch's largest segment; a launch with expert
// segments takes R = 1 (each pair has its own weights), as in the CUDA-core kernel (matmul.cu).
template <int B, int S, bool kNorm, bool kInNorm, bool kDeferred>
gpuError_t launch_rows(const MatvecParams& p, gpuStream_t stream) {
  const LaunchRows l = launch_rows_of(p);
  if (l.rows == 1 || l.experts) return launch_staged<1, B, S, kNorm, kInNorm, 1, kDeferred>(p, stream);
  if (l.rows == 2) return launch_staged<2, B, S, kNorm, kInNorm, 1, kDeferred>(p, stream);
  if (l.rows <= 4) return launch_staged<4, B, S, kNorm, kInNorm, 1, kDeferred>(p, stream);
  return launch_staged<8, B, S, kNorm, kInNorm, 1, kDeferred>(p, stream);
}

// Two tiles a block: launches of 1-2 rows without expert segments (two_tiles).
template <int B, int S, bool kNorm, bool kInNorm, bool kDeferred>
gpuError_t launch_two_tiles(const MatvecParams& p, gpuStream_t stream) {
  if (launch_rows_of(p).rows == 1) return launch_staged<1, B, S, kNorm, kInNorm, 2, kDeferred>(p, stream);
  return launch_staged<2, B, S, kNorm, kInNorm, 2, kDeferred>(p, stream);
}

// kAuto's rule (H200, bench/RESULTS.md): two tiles a block for launches that carry the input
// norm (every block of them first reduces its rows over the whole width, so half the blocks
// is half that work) of at least 4 one-tile blocks per multiprocessor (fewer leave
// multiprocessors idle: the 27B's down and out projections, 320 tiles on 132, 20.5 -> 23.8 us
// with two). The 35B-A3B's in_proj with the input norm went 14.0 -> 11.7 us and its one-stream
// step 2.436 -> 2.36 ms. Plain launches stay on one: alone most were faster with two (the 27B's
// gate/up 44.6 -> 42.9 us, its LM head 271 -> 249), but in the graph step the 27B (all plain
// launches) went 8.16 -> 8.37 ms with two on every launch of 4+ tiles a multiprocessor and
// 8.15 -> 8.19 with two on its LM head alone. Why, from the in-step timeline (kernels/
// gpu_timeline.h): the two-tile launches themselves cost the step less (gate/up 42.4 -> 41.0
// us), but the one-tile down projection after each gate/up then cost 30.8 us instead of 24.7
// (its blocks resident 8.4 us before its wait returned instead of 5.6; how that costs it, 320
// blocks on 132 multiprocessors, is not established). Since the first weight copies go out
// before the grid dependency wait (copies_before_wait) plain launches take the rule too: 27B
// two streams 8.16-8.21 -> 7.77-7.79 ms alone, one stream even; with the down and out on six
// stages (deep_stages) one stream 7.13-7.15 -> 6.82-6.85 and two 8.18-8.22 -> 7.55-7.56
// (bench/RESULTS.md). DELTASERVE_GPU_STAGED_TILES_PLAIN=0 keeps them on one (side-by-side runs).
constexpr int64_t kTwoTilesMinTilesPerMultiprocessor = 4;

bool env_off(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string_view(env) == "0";
}

int64_t launch_tiles(const MatvecParams& p) {
  int64_t total = 0;
  for (int s = 0; s < p.num_segs; ++s) total += matvec::mma_row_tiles(p.seg[s]);
  return total;
}

bool two_tiles(const MatvecParams& p, bool input_norm) {
  static const bool plain_too = !env_off("DELTASERVE_GPU_STAGED_TILES_PLAIN");
  const LaunchRows l = launch_rows_of(p);
  if (l.rows > 2 || l.experts) return false;
  const StagedTiles tiles = staged_tiles();
  if (tiles != StagedTiles::kAuto) return tiles == StagedTiles::kTwo;
  if (!input_norm && !plain_too) return false;
  return launch_tiles(p) >= kTwoTilesMinTilesPerMultiprocessor * matvec::multiprocessors();
}

// 6 stages for one-tile launches of 1-2 rows that fit in one wave at 3 blocks a multiprocessor
// (63 KB a block: the 27B's down and out). Measured slower before the first weight copies went
// out before the grid dependency wait (in the step's timeline the 27B's down went 24.7 -> 26.6
// us and its out 11.9 -> 13.2, though the down alone was faster); with them (5 chunks before the
// wait instead of 3) the 27B's one-stream step 7.13-7.26 -> 6.96-7.04 ms alone, 6.82-6.85 with
// plain launches on two tiles (bench/RESULTS.md). DELTASERVE_GPU_STAGED_DEEP=0 keeps 4 stages
// (side-by-side runs).
constexpr int kDeepStages = 6;
constexpr int64_t kDeepMaxTilesPerMultiprocessor = 3;

bool deep_stages(const MatvecParams& p) {
  static const bool enabled = !env_off("DELTASERVE_GPU_STAGED_DEEP");
  if (!enabled || launch_rows_of(p).rows > 2) return false;
  return launch_tiles(p) <= kDeepMaxTilesPerMultiprocessor * matvec::multiprocessors();
}

// Stages: 2 for launches of at most 2 chunks a row (the 35B-A3B's 2,048- and 512-input rows),
// whose blocks then take less shared memory, so more of them share a multiprocessor; else 4
// for one tile a block, 3 for two (63 KB a block, 3 blocks a multiprocessor; 4 stages would
// hold it to 2: the 27B's gate/up 43.3 vs 40.1 us alone, its LM head 255 vs 237); 6 for
// one-tile launches of 1-2 rows that fit in one wave at 3 blocks a multiprocessor
// (deep_stages: the 27B's down and out). Measured and not kept: 6 for every one-tile launch,
// 8.09 -> 8.78 ms (27B, before the early copies); 5 for one-row launches (4 a multiprocessor
// still), 7.13-7.26 -> 7.45-7.53 with the early copies.
template <int B, bool kNorm, bool kInNorm, bool kDeferred>
gpuError_t launch_stages(const MatvecParams& p, gpuStream_t stream) {
  int64_t chunks = 0;
  for (int s = 0; s < p.num_segs; ++s) chunks = p.seg[s].num_in / Chunk<B>::kInputs > chunks ? p.seg[s].num_in / Chunk<B>::kInputs : chunks;
  const bool two = two_tiles(p, kInNorm);
  if (chunks <= 2) return two ? launch_two_tiles<B, 2, kNorm, kInNorm, kDeferred>(p, stream) : launch_rows<B, 2, kNorm, kInNorm, kDeferred>(p, stream);
  if (two) return launch_two_tiles<B, 3, kNorm, kInNorm, kDeferred>(p, stream);
  if (deep_stages(p)) return launch_rows<B, kDeepStages, kNorm, kInNorm, kDeferred>(p, stream);
  return launch_rows<B, kMaxStages, kNorm, kInNorm, kDeferred>(p, stream);
}

// The epilogue / prologue choice: the norm epilogue, the input norm, a deferred norm's
// product (matmul.cu never asks for two of them), or none.
template <int B>
gpuError_t launch_epilogue(const MatvecParams& p, gpuStream_t stream) {
  if (p.seg[0].norm_counters != nullptr) return launch_stages<B, true, false, false>(p, stream);
  if (p.seg[0].in_norm_w != nullptr) return launch_stages<B, false, true, false>(p, stream);
  // A deferred norm's producer or readers: kernels of their own, so the others keep their
  // machine code (in the shared kernels its epilogue cost the 35B-A3B 1% at one stream and 4%
  // at 16 on the H200, bench/RESULTS.md).
  if (p.seg[0].sq_out != nullptr || p.seg[0].sq_in != nullptr) return launch_stages<B, false, false, true>(p, stream);
  return launch_stages<B, false, false, false>(p, stream);
}

// B for every segment of the launch: 4 when all rows are multiples of 1,024 inputs, else 1. A
// segment's bits follow its B, so a launch mixing a 1,024-multiple matrix with a 256-multiple
// one would give the first matrix other bits than alone: such a launch is refused
// (staged_shapes), and goes to the CUDA cores whole.
bool all_inputs_multiple_of(const MatvecParams& p, int64_t inputs) {
  for (int s = 0; s < p.num_segs; ++s) {
    if (p.seg[s].num_in % inputs != 0) return false;
  }
  return true;
}

// The calling thread's StagedTiles (matmul_gpu.h); DELTASERVE_GPU_STAGED_TILES=1|2 starts it at
// kOne / kTwo (side-by-side runs).
StagedTiles tiles_from_env() {
  const char* env = std::getenv("DELTASERVE_GPU_STAGED_TILES");
  if (env == nullptr) return StagedTiles::kAuto;
  return std::string_view(env) == "1" ? StagedTiles::kOne : std::string_view(env) == "2" ? StagedTiles::kTwo : StagedTiles::kAuto;
}
thread_local StagedTiles t_tiles = tiles_from_env();

// The calling thread's StagedTailLoads (matmul_gpu.h); DELTASERVE_GPU_STAGED_EARLY_TAIL=0 starts
// it at kAfterWalk (side-by-side runs).
thread_local StagedTailLoads t_tail_loads =
    env_off("DELTASERVE_GPU_STAGED_EARLY_TAIL") ? StagedTailLoads::kAfterWalk : StagedTailLoads::kEarly;

// The calling thread's StagedActivationLoads (matmul_gpu.h); DELTASERVE_GPU_STAGED_ALTERNATE=0
// starts it at kEveryChunk (side-by-side runs).
thread_local StagedActivationLoads t_activation_loads =
    env_off("DELTASERVE_GPU_STAGED_ALTERNATE") ? StagedActivationLoads::kEveryChunk : StagedActivationLoads::kAlternateHalves;

}  // namespace

void set_staged_tiles(StagedTiles tiles) { t_tiles = tiles; }
StagedTiles staged_tiles() { return t_tiles; }
void set_staged_tail_loads(StagedTailLoads loads) { t_tail_loads = loads; }
StagedTailLoads staged_tail_loads() { return t_tail_loads; }
void set_staged_activation_loads(StagedActivationLoads loads) { t_activation_loads = loads; }
StagedActivationLoads staged_activation_loads() { return t_activation_loads; }

namespace matvec {

bool staged_shapes(const MatvecParams& p) {
  for (int s = 0; s < p.num_segs; ++s) {
    const MatvecSeg& g = p.seg[s];
    if (g.group_pairs != nullptr || g.num_in % Chunk<1>::kInputs != 0 || g.w_row_bytes % 16 != 0 || !gpu::aligned16(g.w) ||
        (g.w_up != nullptr && !gpu::aligned16(g.w_up)) || (g.expert_ids != nullptr && g.expert_bytes % 16 != 0))
      return false;
  }
  // One B for the launch (launch_rows): all 1,024-multiples or none.
  bool wide = false, narrow = false;
  for (int s = 0; s < p.num_segs; ++s) (p.seg[s].num_in % Chunk<4>::kInputs == 0 ? wide : narrow) = true;
  return !(wide && narrow);
}

gpuError_t launch_q4_0_staged(const MatvecParams& p, gpuStream_t stream) {
  if (all_inputs_multiple_of(p, Chunk<4>::kInputs)) return launch_epilogue<4>(p, stream);
  return launch_epilogue<1>(p, stream);
}

}  // namespace matvec
}  // namespace deltaserve::kernels
