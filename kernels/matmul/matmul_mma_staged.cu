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
// in A rows 0-7, W_up rows in 8-15), or two such tiles side by side (two_tiles, the same
// walk per tile sharing the activation loads), and one group of up to 8 activation rows
// (grid.y). It walks
// K in chunks of 8 * B Q4_0 blocks (Chunk: B = 4, 576 bytes of each row, for rows of a multiple
// of 1,024 inputs; else B = 1), up to 4 chunks in flight; each row's bytes land an odd multiple
// of 4 words apart so the lanes of a quad reading 8 rows never share a bank (4-way conflicts
// otherwise, which cost the 27B's qkv in the probe). Each chunk's activations are split once per
// block into shared memory in fragment order. Warp w takes blocks B w .. B w + B - 1 of every
// chunk, so B is part of the arithmetic: it follows the matrix's shape only.
//
// Input norm (MatmulSegment::input_norm_w): x rows are residual rows; every block first works
// out its rows' RMSNorm scales in rms_norm_gpu's order (input_norm_scales) while chunk 0's
// activations are in flight, then normalises each activation item as it splits it, so the
// products see rms_norm_gpu's output bit for bit without a norm launch before them.
#include <algorithm>
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/matmul/matvec_seg.h"
#include "kernels/matmul/matvec_staged.h"
#include "kernels/matmul/matvec_staged_group.h"

namespace deltaserve::kernels {
namespace {

using matvec::MatvecParams;
using matvec::MatvecSeg;

using staged::Chunk;
using staged::kThreads;
using staged::kTileRows;
using staged::kWarps;

constexpr int64_t kMaxGridY = 65535;

using staged::column_tiles;
using staged::kMaxStages;
using staged::smem_bytes;
#if defined(DS_MMA_BF16)
using staged::prefetch_first_chunks;
using staged::staged_group;
#endif

#if defined(DS_MMA_BF16)
// Groups of up to 4 rows: a launch of one segment (most) takes it whole, without segment_of's
// selection over every segment's fields (predicated uniform loads and selects that every warp
// of every block ran): faster at one and two streams, but 8-16 rows slower (bench/RESULTS.md),
// so 8-row groups keep the selection alone (their machine code is unchanged).
template <int R>
__device__ __forceinline__ MatvecSeg block_segment(const MatvecParams& p) {
  return R <= 4 && p.num_segs == 1 ? p.seg[0] : matvec::segment_of(p);
}
#endif

// Each kernel: the block's segment and row group (kernel parameters only), then either its
// first chunks' copies into shared memory, the grid dependency wait and the walk, all in
// staged_group, or (an expert segment's rows are known only after the wait: its expert ids
// come from the router) the L2 prefetch of its first chunks, the wait, then the walk.
template <int R, int B, int S, bool kNorm, bool kInNorm, bool kDeferred>
__global__ void __launch_bounds__(kThreads) matvec_staged_kernel(const MatvecParams p) {
#if defined(DS_MMA_BF16)
  extern __shared__ __align__(16) uint8_t smem[];
  const MatvecSeg g = block_segment<R>(p);
  const int64_t group = p.group_offset + blockIdx.y;
  // The weights' first copies (a prefetch into shared memory) go out in staged_group before its
  // wait, for launches without expert segments.
  const bool early = p.copies_before_wait && group < g.num_groups && g.expert_ids == nullptr;
  if (!early) {
    if (p.prefetch_weights && group < g.num_groups && g.expert_ids == nullptr) prefetch_first_chunks<B, S, 1>(g);
    gpu::begin_kernel();
    if (group >= g.num_groups) return;
  }
  staged_group<R, B, S, kNorm, kInNorm, 1, kDeferred>(g, group, smem, early, p.early_tail_loads, p.alternate_halves);
#else
  gpu::begin_kernel();
  (void)p;  // never launched there: matvec_math_on_device gives kCudaCores without bf16 mma
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
  // The weights' first copies (a prefetch into shared memory) go out in staged_group before its
  // wait, for launches without expert segments.
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

template <int R, int B, int S, bool kNorm, bool kInNorm, int M, bool kDeferred>
gpuError_t launch_staged(MatvecParams p, gpuStream_t stream) {
  constexpr size_t kSmem = smem_bytes<R, B, S, M>();
  // Devices whose attribute is set: bits only ever added, recording the driver's own
  // per-process state (allow_dynamic_smem), so no launch reads anything a caller set.
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
  // largest matrix is at most matvec::kPrefetchMaxMatrixBytes, as the other matvec launchers
  // (prefetching the larger ones too made the 27B's steps slower, bench/RESULTS.md).
  size_t largest = 0;
  for (int s = 0; s < p.num_segs; ++s) {
    const MatvecSeg& g = p.seg[s];
    largest = std::max(largest, static_cast<size_t>(g.num_out) * g.w_row_bytes * (g.w_up != nullptr ? 2 : 1));
  }
  p.prefetch_weights = largest <= matvec::kPrefetchMaxMatrixBytes;
  p.copies_before_wait = p.early_tail_loads = p.alternate_halves = true;  // matvec_seg.h: values on purpose
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

// Two tiles a block for launches of at least 4 one-tile blocks per multiprocessor (fewer leave
// multiprocessors idle). With the input norm every block first reduces its rows over the whole
// width, so half the blocks is half that work. Plain launches: alone most were faster with
// two, but in the graph step the one-tile launch after a two-tile one then cost more (its
// blocks resident longer before its wait returned); since the first weight copies go out
// before the grid dependency wait, two tiles gain in the step as well (bench/RESULTS.md).
constexpr int64_t kTwoTilesMinTilesPerMultiprocessor = 4;

int64_t launch_tiles(const MatvecParams& p) {
  int64_t total = 0;
  for (int s = 0; s < p.num_segs; ++s) total += matvec::mma_row_tiles(p.seg[s]);
  return total;
}

bool two_tiles(const MatvecParams& p, StagedTiles tiles) {
  const LaunchRows l = launch_rows_of(p);
  if (l.rows > 2 || l.experts) return false;
  if (tiles != StagedTiles::kAuto) return tiles == StagedTiles::kTwo;
  return launch_tiles(p) >= kTwoTilesMinTilesPerMultiprocessor * matvec::multiprocessors();
}

// 6 stages for one-tile launches of 1-2 rows that fit in one wave at 3 blocks a multiprocessor
// (63 KB a block: the 27B's down and out): with the first weight copies before the grid
// dependency wait, 5 chunks go out before it instead of 3 (bench/RESULTS.md).
constexpr int kDeepStages = 6;
constexpr int64_t kDeepMaxTilesPerMultiprocessor = 3;

bool deep_stages(const MatvecParams& p) {
  if (launch_rows_of(p).rows > 2) return false;
  return launch_tiles(p) <= kDeepMaxTilesPerMultiprocessor * matvec::multiprocessors();
}

// Stages: 2 for launches of at most 2 chunks a row (the 35B-A3B's 2,048- and 512-input rows),
// whose blocks then take less shared memory, so more of them share a multiprocessor; else 4
// for one tile a block, 3 for two (63 KB a block, 3 blocks a multiprocessor; 4 stages would
// hold it to 2, slower on the 27B's gate/up and LM head); 6 for one-tile launches of 1-2 rows
// that fit in one wave at 3 blocks a multiprocessor (deep_stages: the 27B's down and out).
// Measured slower and not kept: 6 for every one-tile launch; 5 for one-row launches
// (bench/RESULTS.md).
template <int B, bool kNorm, bool kInNorm, bool kDeferred>
gpuError_t launch_stages(const MatvecParams& p, StagedTiles tiles, gpuStream_t stream) {
  int64_t chunks = 0;
  for (int s = 0; s < p.num_segs; ++s) chunks = p.seg[s].num_in / Chunk<B>::kInputs > chunks ? p.seg[s].num_in / Chunk<B>::kInputs : chunks;
  const bool two = two_tiles(p, tiles);
  if (chunks <= 2) return two ? launch_two_tiles<B, 2, kNorm, kInNorm, kDeferred>(p, stream) : launch_rows<B, 2, kNorm, kInNorm, kDeferred>(p, stream);
  if (two) return launch_two_tiles<B, 3, kNorm, kInNorm, kDeferred>(p, stream);
  if (deep_stages(p)) return launch_rows<B, kDeepStages, kNorm, kInNorm, kDeferred>(p, stream);
  return launch_rows<B, kMaxStages, kNorm, kInNorm, kDeferred>(p, stream);
}

// The epilogue / prologue choice: the norm epilogue, the input norm, a deferred norm's
// product (matmul.cu never asks for two of them), or none.
template <int B>
gpuError_t launch_epilogue(const MatvecParams& p, StagedTiles tiles, gpuStream_t stream) {
  if (p.seg[0].norm_counters != nullptr) return launch_stages<B, true, false, false>(p, tiles, stream);
  if (p.seg[0].in_norm_w != nullptr) return launch_stages<B, false, true, false>(p, tiles, stream);
  // A deferred norm's producer or readers: kernels of their own, so the others keep their
  // machine code (in the shared kernels its epilogue made the 35B-A3B's steps slower,
  // bench/RESULTS.md).
  if (p.seg[0].sq_out != nullptr || p.seg[0].sq_in != nullptr) return launch_stages<B, false, false, true>(p, tiles, stream);
  return launch_stages<B, false, false, false>(p, tiles, stream);
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

}  // namespace

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

gpuError_t launch_q4_0_staged(const MatvecParams& p, StagedTiles tiles, gpuStream_t stream) {
  if (all_inputs_multiple_of(p, Chunk<4>::kInputs)) return launch_epilogue<4>(p, tiles, stream);
  return launch_epilogue<1>(p, tiles, stream);
}

}  // namespace matvec
}  // namespace deltaserve::kernels
