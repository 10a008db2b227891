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

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/matmul/matvec_seg.h"
#include "kernels/norm/norm_block.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;
using gpu::DecodeF32;
using gpu::DecodeHalf;
using gpu::DecodeQ8_0;
using gpu::DecodeQ4_0;
using gpu::DecodeQ4_K;
using gpu::DecodeQ5_K;
using gpu::DecodeQ6_K;
using matvec::MatvecParams;
using matvec::MatvecSeg;
using matvec::kPrefetchMaxMatrixBytes;
using matvec::prefetch_block_weights;
using matvec::kMaxSegs;
using matvec::norm_epilogue;
using matvec::segment_of;

constexpr int kThreads = 128;
constexpr int kOutputsPerBlock = 8;
constexpr int kMaxRowsPerGroup = 8;
constexpr int64_t kMaxGridY = 65535;

// acc[i][r] += dot(chunk of output i, x row r at x0..x0+3, x1..x1+3), elements in order.
template <int O, int R>
__device__ __forceinline__ void multiply_chunk(const float (&wv)[O][8], const float* const* xs, int64_t x0, int64_t x1,
                                               float (&acc)[O][R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float4 a = *reinterpret_cast<const float4*>(xs[r] + x0);
    const float4 b = *reinterpret_cast<const float4*>(xs[r] + x1);
    const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < O; ++i) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][r] = fmaf(wv[i][e], xv[e], acc[i][r]);
    }
  }
}

// Lane 0 of each warp: the warp's outputs for the group's valid rows.
template <int kOutputsPerWarp, int R, bool kGrouped>
__device__ __forceinline__ void write_outputs(const MatvecSeg& g, const float (&acc)[kOutputsPerWarp][R], int64_t group,
                                              int64_t row0, int num_valid, int64_t out0) {
  const bool gated = g.w_up != nullptr;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= num_valid) continue;
    // y row: the pair (expert-grouped: read back here rather than kept live in registers).
    const int64_t y_row = kGrouped ? g.group_pairs[group * R + r] : g.expert_ids != nullptr ? group : row0 + r;
    float* y_row_ptr = g.y + y_row * g.y_stride;
    if (gated) {
      // swiglu_gpu's expression on the two dots: bit-identical to the unfused pair.
#pragma unroll
      for (int j = 0; j < kOutputsPerWarp / 2; ++j) {
        const float gate = acc[2 * j][r];
        if (out0 + j < g.num_out) y_row_ptr[out0 + j] = gate / (1.0f + expf(-gate)) * acc[2 * j + 1][r];
      }
      continue;
    }
#pragma unroll
    for (int i = 0; i < kOutputsPerWarp; ++i) {
      if (out0 + i >= g.num_out) continue;
      float* y = y_row_ptr + out0 + i;
      *y = g.accumulate ? *y + acc[i][r] : acc[i][r];
    }
  }
}

// Block: kThreads threads x one group of up to R activation rows (grid.y). Plain segments:
// kOutputsPerBlock outputs (kOutputsPerWarp slots per warp, one output each). Gated segments:
// kOutputsPerBlock / 2 outputs; output j of a warp takes slots 2j (W row) and 2j + 1 (W_up row). Rows past num_rows read
// row 0 of the group (valid memory) and are not written; outputs past num_out likewise. An
// output's dot product is the same instruction sequence whatever its neighbours, segment or R.
// kNorm: the launch is matmul_norm_gpu's (its own instantiation, so the epilogue's code and
// registers stay out of every other matvec: inlined into all of them it made the expert
// matvec much slower at 64 streams).
// One row group of the block's segment (the kernel below).
template <class D, int R, bool kNorm, bool kGrouped>
__device__ __forceinline__ void matvec_group(const MatvecSeg& g, int64_t group, bool prefetch) {
  constexpr int kWarps = kThreads / kWarpSize;
  constexpr int kOutputsPerWarp = kOutputsPerBlock / kWarps;
  static_assert(kOutputsPerWarp * kWarps == kOutputsPerBlock && kOutputsPerWarp % 2 == 0);
  const int lane = gpu::lane_id();
  const int64_t row0 = group * R;
  int num_valid = static_cast<int>(min(static_cast<int64_t>(R), g.num_rows - row0));
  const int64_t block = static_cast<int64_t>(blockIdx.x) - g.block_begin;
  const bool gated = g.w_up != nullptr;

  const uint8_t* w = g.w;
  const uint8_t* w_up = g.w_up;
  const float* xs[R];
  if constexpr (kGrouped) {  // expert-grouped: the group's expert; its pairs' input rows
    const size_t e = static_cast<size_t>(g.group_expert[group]) * g.expert_bytes;
    w += e;
    if (gated) w_up += e;
    const int32_t* pairs = g.group_pairs + group * R;
    const int64_t first = pairs[0];
    num_valid = 1;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t pair = pairs[r];
      if (r > 0 && pair >= 0) num_valid = r + 1;  // valid pairs are a prefix
      xs[r] = g.x + ((pair >= 0 ? pair : first) / g.pairs_per_x_row) * g.x_stride;  // pad rows: the first
    }
  } else if (g.expert_ids != nullptr) {  // R == 1: this pair's expert and input row
    const size_t e = static_cast<size_t>(g.expert_ids[group]) * g.expert_bytes;
    w += e;
    if (gated) w_up += e;
    xs[0] = g.x + (group / g.pairs_per_x_row) * g.x_stride;
    if (prefetch) prefetch_block_weights(g, w, w_up, kOutputsPerBlock);
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) xs[r] = g.x + (row0 + (r < num_valid ? r : 0)) * g.x_stride;
  }
  // Output of slot i: plain out0 + i; gated out0 + i / 2 (W row for even i, W_up row for odd).
  const int64_t out0 = gated ? block * (kOutputsPerBlock / 2) + gpu::warp_id() * (kOutputsPerWarp / 2)
                             : block * kOutputsPerBlock + gpu::warp_id() * kOutputsPerWarp;
  const uint8_t* rows[kOutputsPerWarp];
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
    const int64_t o = min(gated ? out0 + i / 2 : out0 + i, g.num_out - 1);
    rows[i] = (gated && i % 2 == 1 ? w_up : w) + static_cast<size_t>(o) * g.w_row_bytes;
  }

  float acc[kOutputsPerWarp][R];
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;
  }
  const int64_t num_chunks = g.num_in / 8;  // every layout decodes 8 elements a chunk
  // Groups of 4+ rows decode two chunks (their weight loads in flight together) before
  // multiplying (faster for the 27B at 64 streams); one or two rows stay one chunk at a time
  // (unrolled, batch 1 was slower; bench/RESULTS.md).
  // Each accumulator still takes its chunks in increasing order and its elements in order,
  // so every bit is the plain loop's.
  constexpr int kUnroll = R >= 4 ? 2 : 1;
  int64_t c = lane;
  for (; c + (kUnroll - 1) * kWarpSize < num_chunks; c += kUnroll * kWarpSize) {
    float wv[kUnroll][kOutputsPerWarp][8];
    int64_t x0[kUnroll], x1[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int i = 0; i < kOutputsPerWarp; ++i) D::decode(rows[i], c + u * kWarpSize, wv[u][i], x0[u], x1[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) multiply_chunk<kOutputsPerWarp, R>(wv[u], xs, x0[u], x1[u], acc);
  }
  for (; c < num_chunks; c += kWarpSize) {
    float wv[kOutputsPerWarp][8];
    int64_t x0 = 0, x1 = 0;
#pragma unroll
    for (int i = 0; i < kOutputsPerWarp; ++i) D::decode(rows[i], c, wv[i], x0, x1);
    multiply_chunk<kOutputsPerWarp, R>(wv, xs, x0, x1, acc);
  }
#pragma unroll
  for (int i = 0; i < kOutputsPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = gpu::warp_sum(acc[i][r]);
  }
  if (lane == 0) write_outputs<kOutputsPerWarp, R, kGrouped>(g, acc, group, row0, num_valid, out0);
  if constexpr (kNorm) norm_epilogue(g, group, row0, num_valid, gridDim.x);
}

// Block (x, y): x picks the segment and its outputs; y the row group (plain and expert
// segments), or the first of the groups y, y + gridDim.y, ... (expert-grouped segments, whose
// group count is known on the device only; they run in the launch of group_offset 0).
// kGrouped: the launch has expert-grouped segments (its own instantiation, so the plain
// kernels' code and registers stay as they were: inlined everywhere the grouped path took
// the 8-row kernel from 148 to 255 registers).
template <class D, int R, bool kNorm, bool kGrouped>
__global__ void __launch_bounds__(kThreads) matvec_kernel(const MatvecParams p) {
  const MatvecSeg g = segment_of(p);
  // Plain segments: the first row group fetches (the others read the same rows).
  const bool prefetch = p.prefetch_weights && p.group_offset == 0;
  if (prefetch && g.expert_ids == nullptr && blockIdx.y == 0) prefetch_block_weights(g, g.w, g.w_up, kOutputsPerBlock);
  gpu::begin_kernel();
  if constexpr (kGrouped) {
    if (g.group_pairs != nullptr) {
      if (p.group_offset != 0) return;
      const int64_t count = *g.group_count;
#pragma unroll 1
      for (int64_t group = blockIdx.y; group < count; group += gridDim.y)
        matvec_group<D, R, kNorm, true>(g, group, false);
      return;
    }
  }
  const int64_t group = p.group_offset + blockIdx.y;
  if (group >= g.num_groups) return;
  matvec_group<D, R, kNorm, false>(g, group, prefetch);
}

template <class D, int R, bool kNorm, bool kGrouped = false>
gpuError_t launch_groups(MatvecParams p, gpuStream_t stream) {
  int64_t grid_x = 0, num_groups = 0;
  for (int s = 0; s < p.num_segs; ++s) {
    MatvecSeg& g = p.seg[s];
    // Expert-grouped: grid rows for about one group each (the kernel strides past them).
    g.num_groups = (g.num_rows + R - 1) / R;
    if (g.group_pairs != nullptr && g.num_groups > kMaxGridY) g.num_groups = kMaxGridY;
    g.block_begin = grid_x;
    const int64_t per_block = g.w_up != nullptr ? kOutputsPerBlock / 2 : kOutputsPerBlock;
    grid_x += (g.num_out + per_block - 1) / per_block;
    num_groups = g.num_groups > num_groups ? g.num_groups : num_groups;
  }
  // Prefetch at decode sizes and for small matrices only: with groups of 8 rows or more than
  // 32 row groups (the expert pairs of 16+ streams) it measured slower, and so with the 27B's
  // large matrices (kPrefetchMaxMatrixBytes).
  bool small_matrices = true;
  for (int s = 0; s < p.num_segs; ++s) {
    const size_t matrix_bytes = static_cast<size_t>(p.seg[s].num_out) * p.seg[s].w_row_bytes;
    small_matrices = small_matrices && matrix_bytes <= kPrefetchMaxMatrixBytes;
  }
  p.prefetch_weights = R <= 4 && num_groups <= 32 && small_matrices;
  for (int64_t first = 0; first < num_groups; first += kMaxGridY) {
    p.group_offset = first;
    const dim3 grid(static_cast<unsigned>(grid_x),
                    static_cast<unsigned>(num_groups - first < kMaxGridY ? num_groups - first : kMaxGridY));
    gpu::launch(matvec_kernel<D, R, kNorm, kGrouped>, grid, kThreads, 0, stream, p);
  }
  return gpuGetLastError();
}

template <class D, bool kNorm>
gpuError_t launch_matvec(const MatvecParams& p, gpuStream_t stream) {
  // Rows go in groups of R (a power of two); a row's arithmetic is the same for every R.
  // Expert segments take R = 1 (each pair has its own weights); so does the whole launch.
  // Expert-grouped segments set R (their rows_per_group, checked equal by the caller).
  int64_t n = 0;
  bool expert_mode = false;
  int grouped_rows = 0;
  for (int s = 0; s < p.num_segs; ++s) {
    n = p.seg[s].num_rows > n ? p.seg[s].num_rows : n;
    if (p.seg[s].group_pairs != nullptr) grouped_rows = p.seg[s].group_rows;
    else expert_mode = expert_mode || p.seg[s].expert_ids != nullptr;
  }
  if constexpr (!kNorm) {  // the norm epilogue never meets expert segments
    if (grouped_rows == 2) return launch_groups<D, 2, false, true>(p, stream);
    if (grouped_rows == 4) return launch_groups<D, 4, false, true>(p, stream);
  }
  if (expert_mode || n == 1) return launch_groups<D, 1, kNorm>(p, stream);
  if (n == 2) return launch_groups<D, 2, kNorm>(p, stream);
  if (n <= 4) return launch_groups<D, 4, kNorm>(p, stream);
  return launch_groups<D, kMaxRowsPerGroup, kNorm>(p, stream);
}

int64_t block_elements(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0: return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return 256;
    default: return 1;
  }
}

bool valid(const MatmulArgs& a) {
  const bool supported = a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16 ||
                         a.w_type == DType::Q8_0 || a.w_type == DType::Q4_0 || a.w_type == DType::Q4_K ||
                         a.w_type == DType::Q5_K || a.w_type == DType::Q6_K;
  if (!supported || a.num_in <= 0 || a.num_in % 8 != 0 || a.num_in % block_elements(a.w_type) != 0) return false;
  if (!gpu::aligned16(a.x) || a.x_stride % 4 != 0) return false;
  const bool plain = a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16;
  if (plain && (!gpu::aligned16(a.w) || a.w_row_bytes % 16 != 0)) return false;
  if ((reinterpret_cast<uintptr_t>(a.w) & 1u) != 0 || a.w_row_bytes % 2 != 0) return false;
  return true;
}

template <bool kNorm>
gpuError_t dispatch_as(const MatvecParams& p, DType type, gpuStream_t stream) {
  switch (type) {
    case DType::F32: return launch_matvec<DecodeF32, kNorm>(p, stream);
    case DType::F16: return launch_matvec<DecodeHalf<false>, kNorm>(p, stream);
    case DType::BF16: return launch_matvec<DecodeHalf<true>, kNorm>(p, stream);
    case DType::Q8_0: return launch_matvec<DecodeQ8_0, kNorm>(p, stream);
    case DType::Q4_0: return launch_matvec<DecodeQ4_0, kNorm>(p, stream);
    case DType::Q4_K: return launch_matvec<DecodeQ4_K, kNorm>(p, stream);
    case DType::Q5_K: return launch_matvec<DecodeQ5_K, kNorm>(p, stream);
    case DType::Q6_K: return launch_matvec<DecodeQ6_K, kNorm>(p, stream);
    default: return gpuErrorInvalidValue;
  }
}

gpuError_t dispatch_cuda_cores(const MatvecParams& p, DType type, gpuStream_t stream) {
  return p.seg[0].norm_counters != nullptr ? dispatch_as<true>(p, type, stream) : dispatch_as<false>(p, type, stream);
}

// The matmul forms: which one runs, for which shape and row count, and why. The backend
// (runtime/gpu/gpu_ffn_layer.cpp, gpu_moe_layer.cpp) picks the entry point; dispatch() below
// picks the matvec form. Every rule reads the matrix's shape, the weight type, the row count
// and the backend-lifetime MatvecContext::math only, so a row's bits never follow the load.
//
// | entry point / form                         | runs for                                          | why |
// |--------------------------------------------|---------------------------------------------------|-----|
// | matmul_prefill_gpu, f32 tile (matmul_prefill.cu) | prefill rows, every weight type; Q4_0 where the device has no bf16 mma | weights decoded once per 64-row tile, shared by the rows |
// | matmul_prefill_gpu, exact bf16 tile (matmul_tile_exact.h) | prefill rows of Q4_0 with bf16 mma (sm_80+); tensor mode's decode rows of matrices >= 65,536 outputs (the LM head) | exact products, bits as close as f32's, several times faster; the wide LM head fills the GPU at decode row counts |
// | matmul_experts_prefill_gpu (matmul_experts_prefill.cu) | prefill expert pairs; tensor mode's decode expert pairs | each expert's weights read once per tile of the pairs routed to it |
// | matvec on the CUDA cores (this file)       | every type but Q4_0; Q4_0 under kCudaCores (fma); expert-grouped launches; staged launches staged_shapes refuses | f32 chains, groups of R = 1, 2, 4 or 8 rows (expert pairs R = 1, grouped pairs R = 2 or 4) |
// | tensor-core matvec (matmul_mma.cu)         | Q4_0 decode and verify rows under kTensorCores, launches without expert segments | many rows share each weight load; pre-split activations from 2^31 multiply-adds |
// | staged matvec (matmul_mma_staged.cu)       | Q4_0 under kStaged where staged_shapes holds (rows of 256k inputs, 16-byte aligned, expert pairs one a group); 1-2 rows: one or two tiles a block by tiles per multiprocessor; carried and deferred norms | weights staged through shared memory onto the tensor cores: a few rows are bound by instructions, not bytes |
// | moe_down_combine_gpu (kernels/moe/moe_down_combine.cu) | the staged matvec's MoE decode steps of 1-16 rows | the down products and the combine in one launch, the expert outputs never in memory |
// | matmul_norm_gpu (kNorm here)               | no product path (the parity suite keeps it)       | the norm launch won inside step graphs |
//
// Q4_0 under MatvecMath::kTensorCores: launches without expert segments go to the tensor
// cores; a launch with expert segments (and the shared expert's segments riding in it) stays
// on the CUDA cores, whose expert walks measured faster (matmul_gpu.h). kStaged: every launch
// where its shape rule holds (staged_shapes: expert segments too, one pair per row group like
// the CUDA cores' walk, but not expert-grouped ones).
gpuError_t dispatch(const MatvecParams& p, DType type, const MatvecContext& context, gpuStream_t stream,
                    StagedTiles tiles = StagedTiles::kAuto) {
  bool experts = false;
  for (int s = 0; s < p.num_segs; ++s) experts = experts || p.seg[s].expert_ids != nullptr;
  if (type == DType::Q4_0) {
    const MatvecMath math = matvec_math_on_device(context.math);
    if (math == MatvecMath::kTensorCores && !experts) return matvec::launch_q4_0_mma(p, context, stream);
    if (math == MatvecMath::kStaged && matvec::staged_shapes(p)) return matvec::launch_q4_0_staged(p, tiles, stream);
  }
  return dispatch_cuda_cores(p, type, stream);
}

MatvecSeg seg_of(const MatmulArgs& a) {
  MatvecSeg g{};
  g.w = static_cast<const uint8_t*>(a.w);
  g.w_row_bytes = a.w_row_bytes;
  g.num_in = a.num_in;
  g.num_out = a.num_out;
  g.x = a.x;
  g.x_stride = a.x_stride;
  g.y = a.y;
  g.y_stride = a.y_stride;
  g.num_rows = a.num_rows;
  g.accumulate = a.accumulate;
  g.pairs_per_x_row = 1;
  return g;
}

}  // namespace

gpuError_t matmul_gpu(const MatmulArgs& args, const MatvecContext& context, gpuStream_t stream) {
  if (!valid(args)) return gpuErrorInvalidValue;
  if (args.num_rows <= 0 || args.num_out <= 0) return gpuSuccess;
  MatvecParams p{};
  p.seg[0] = seg_of(args);
  p.num_segs = 1;
  return dispatch(p, args.w_type, context, stream, args.staged_tiles);
}

gpuError_t matmul_norm_gpu(const MatmulArgs& args, const MatmulNormEpilogue& norm, const MatvecContext& context,
                           gpuStream_t stream) {
  if (!valid(args) || norm.weight == nullptr || norm.out == nullptr || norm.counters == nullptr ||
      norm.out_stride < args.num_out)
    return gpuErrorInvalidValue;
  if (args.num_rows <= 0 || args.num_out <= 0) return gpuSuccess;
  MatvecParams p{};
  p.seg[0] = seg_of(args);
  p.seg[0].norm_w = norm.weight;
  p.seg[0].norm_eps = norm.eps;
  p.seg[0].norm_out = norm.out;
  p.seg[0].norm_out_stride = norm.out_stride;
  p.seg[0].norm_counters = norm.counters;
  p.num_segs = 1;
  return dispatch(p, args.w_type, context, stream, args.staged_tiles);
}

gpuError_t matmul_experts_gpu(const MatmulExpertsArgs& args, const MatvecContext& context, gpuStream_t stream) {
  MatmulSegment s{};
  s.args = args.base;
  s.args.num_rows = args.num_pairs;
  s.expert_ids = args.expert_ids;
  s.pairs_per_x_row = args.pairs_per_x_row;
  if (args.expert_ids == nullptr) return gpuErrorInvalidValue;
  return matmul_segments_gpu(&s, 1, context, stream);
}

namespace {

// The launch's parameter block from the segments (their checks included); false when a
// segment is invalid.
bool params_of(const MatmulSegment* segs, int num_segs, MatvecParams& p) {
  p = MatvecParams{};
  // Expert-grouped segments: one rows_per_group (2 or 4) for the launch, and no per-pair
  // expert segment beside them (those need groups of one row).
  int grouped_rows = 0;
  bool per_pair = false;
  for (int s = 0; s < num_segs; ++s) {
    const ExpertPairGroups& gr = segs[s].groups;
    if (gr.rows_per_group == 0) {
      per_pair = per_pair || segs[s].expert_ids != nullptr;
      continue;
    }
    // 2 or 4: an 8-row grouped kernel took 255 registers on sm_90 (the plain one 148).
    const bool ok_rows = gr.rows_per_group == 2 || gr.rows_per_group == 4;
    if (!ok_rows || gr.expert == nullptr || gr.pairs == nullptr || gr.count == nullptr || segs[s].expert_ids == nullptr ||
        (grouped_rows != 0 && grouped_rows != gr.rows_per_group))
      return false;
    grouped_rows = gr.rows_per_group;
  }
  if (grouped_rows != 0 && per_pair) return false;
  for (int s = 0; s < num_segs; ++s) {
    const MatmulSegment& in = segs[s];
    const MatmulArgs& a = in.args;
    if (!valid(a) || a.w_type != segs[0].args.w_type || in.pairs_per_x_row <= 0) return false;
    if (in.w_up != nullptr && (a.accumulate || (reinterpret_cast<uintptr_t>(in.w_up) & 1u) != 0 ||
                               ((a.w_type == DType::F32 || a.w_type == DType::F16 || a.w_type == DType::BF16) &&
                                !gpu::aligned16(in.w_up))))
      return false;
    if (a.num_rows <= 0 || a.num_out <= 0) continue;  // nothing to do for this segment
    MatvecSeg& g = p.seg[p.num_segs++];
    g = seg_of(a);
    g.w_up = static_cast<const uint8_t*>(in.w_up);
    g.expert_ids = in.expert_ids;
    g.expert_bytes = static_cast<size_t>(a.num_out) * a.w_row_bytes;
    g.pairs_per_x_row = in.pairs_per_x_row;
    if (in.groups.rows_per_group != 0) {
      g.group_expert = in.groups.expert;
      g.group_pairs = in.groups.pairs;
      g.group_count = in.groups.count;
      g.group_rows = in.groups.rows_per_group;
    }
    g.in_norm_w = in.input_norm_w;
    g.in_norm_eps = in.input_norm_eps;
    g.xw_w = in.norm_partials.w;
    g.xw_out = in.norm_partials.out;
    g.xw_stride = in.norm_partials.out_stride;
    g.sq_out = in.norm_partials.squares;
    g.sq_out_stride = in.norm_partials.squares_stride;
    g.sq_in = in.deferred_norm.squares;
    g.sq_in_stride = in.deferred_norm.squares_stride;
    g.sq_in_count = (a.num_in + 15) / 16;
    g.sq_eps = in.deferred_norm.eps;
  }
  return true;
}

bool has_deferred_norm(const MatmulSegment& s) { return s.norm_partials.squares != nullptr || s.deferred_norm.squares != nullptr; }

// The deferred-norm rule (matmul_segments_deferred_norm_supported) on the launch's segments.
bool deferred_norm_launch(const MatmulSegment* segs, int num_segs, const MatvecParams& p, const MatvecContext& context) {
  const MatmulSegment& first = segs[0];
  if (first.args.w_type != DType::Q4_0 || matvec_math_on_device(context.math) != MatvecMath::kStaged) return false;
  if (first.norm_partials.squares != nullptr) {  // producer: one plain segment
    const MatmulSegment::NormPartials& n = first.norm_partials;
    if (num_segs != 1 || first.w_up != nullptr || first.expert_ids != nullptr || first.groups.rows_per_group != 0 ||
        first.input_norm_w != nullptr || first.deferred_norm.squares != nullptr || n.w == nullptr || n.out == nullptr ||
        n.out_stride < first.args.num_out || n.squares_stride < (first.args.num_out + 15) / 16)
      return false;
  } else {
    for (int s = 0; s < num_segs; ++s) {
      const MatmulSegment& in = segs[s];
      if (in.deferred_norm.squares != first.deferred_norm.squares || in.deferred_norm.eps != first.deferred_norm.eps ||
          in.deferred_norm.squares_stride < (first.args.num_in + 15) / 16 || in.norm_partials.squares != nullptr ||
          in.input_norm_w != nullptr || in.expert_ids != nullptr || in.groups.rows_per_group != 0 ||
          in.args.x != first.args.x || in.args.x_stride != first.args.x_stride || in.args.num_rows != first.args.num_rows ||
          in.args.num_in != first.args.num_in || in.args.num_in > kDeferredNormMaxInputs)
        return false;
    }
  }
  return p.num_segs == 0 || matvec::staged_shapes(p);
}

// The input-norm rule (matmul_segments_input_norm_supported) on the launch's segments: every
// segment (empty ones too) normalises the same residual rows the same way.
bool input_norm_launch(const MatmulSegment* segs, int num_segs, const MatvecParams& p, const MatvecContext& context) {
  const MatmulSegment& first = segs[0];
  if (first.input_norm_w == nullptr || first.args.w_type != DType::Q4_0 ||
      matvec_math_on_device(context.math) != MatvecMath::kStaged ||
      !gpu::aligned16(first.input_norm_w))
    return false;
  for (int s = 0; s < num_segs; ++s) {
    const MatmulSegment& in = segs[s];
    if (in.input_norm_w != first.input_norm_w || in.input_norm_eps != first.input_norm_eps || in.expert_ids != nullptr ||
        in.groups.rows_per_group != 0 || in.args.x != first.args.x || in.args.x_stride != first.args.x_stride ||
        in.args.num_rows != first.args.num_rows || in.args.num_in != first.args.num_in)
      return false;
  }
  return p.num_segs == 0 || matvec::staged_shapes(p);
}

}  // namespace

bool matmul_segments_input_norm_supported(const MatmulSegment* segs, int num_segs, const MatvecContext& context) {
  if (segs == nullptr || num_segs < 1 || num_segs > kMaxMatmulSegments) return false;
  MatvecParams p{};
  return params_of(segs, num_segs, p) && input_norm_launch(segs, num_segs, p, context);
}

bool matmul_segments_deferred_norm_supported(const MatmulSegment* segs, int num_segs, const MatvecContext& context) {
  if (segs == nullptr || num_segs < 1 || num_segs > kMaxMatmulSegments) return false;
  MatvecParams p{};
  return params_of(segs, num_segs, p) && deferred_norm_launch(segs, num_segs, p, context);
}

gpuError_t matmul_segments_gpu(const MatmulSegment* segs, int num_segs, const MatvecContext& context, gpuStream_t stream) {
  if (segs == nullptr || num_segs < 1 || num_segs > kMaxMatmulSegments) return gpuErrorInvalidValue;
  MatvecParams p{};
  if (!params_of(segs, num_segs, p)) return gpuErrorInvalidValue;
  bool input_norm = false, deferred = false;
  for (int s = 0; s < num_segs; ++s) {
    input_norm = input_norm || segs[s].input_norm_w != nullptr;
    deferred = deferred || has_deferred_norm(segs[s]);
  }
  if (input_norm && !input_norm_launch(segs, num_segs, p, context)) return gpuErrorInvalidValue;
  if (deferred && !deferred_norm_launch(segs, num_segs, p, context)) return gpuErrorInvalidValue;
  if (p.num_segs == 0) return gpuSuccess;
  // The input and deferred norms ride only in the staged launch (their rules checked it).
  if (input_norm || deferred) return matvec::launch_q4_0_staged(p, segs[0].args.staged_tiles, stream);
  return dispatch(p, segs[0].args.w_type, context, stream, segs[0].args.staged_tiles);
}

}  // namespace deltaserve::kernels
