// Q4_0 matrix-vector products on tensor cores (matmul_gpu.h, MatvecMath::kTensorCores): the
// launches of plain, gated and norm-epilogue segments (no expert segments). The CUDA-core matvec
// (matmul.cu) spends one fused multiply-add per weight and activation row, so at 64 streams
// it is bound by instruction issue, not by the weights' bytes; an mma.sync m16n8k16 takes 16
// weight rows x 8 activation rows x 16 inputs per instruction.
//
// Exact products, f32 sums. A Q4_0 weight is d * (q - 8) with q a 4-bit integer: q - 8 is exact
// in bf16, so the tensor core multiplies the integers and d scales each block's sum. An f32
// activation x is split into three bf16 parts, x = hi + mid + lo exactly (8 significant bits
// each), so every product the tensor core forms is exact; what differs from the f32 chain of
// the CUDA-core kernel is only where the sums round (the tensor core's accumulation, then one
// fused multiply-add by d per block), the same order of error (NMSE ~1e-13 against matmul_ref).
//
// Layout. A row tile is 16 weight rows (plain: 16 outputs; gated: 8 outputs, W rows in A rows
// 0-7 and W_up rows in 8-15, so a lane holds each output's gate and up side by side). A block
// of 8 warps takes 8 / S row tiles, S warps each: warp s of a tile walks the s-th of S K
// slices of the row's 32-element blocks, and the slices' sums are added in slice order
// through shared memory (S = 4 or 8, from the matrix's shape only: k_slices). A group of up to
// 8 * NT activation rows is NT column tiles of 8. One Q4_0 block is two k16 steps (low
// nibbles, then high nibbles); the elements inside a step are permuted so that lane (g =
// lane / 4, c = lane % 4) finds its fragment in qs bytes 4c..4c+3 of rows g and g + 8, and its
// activations in the float4s at 4c and 16 + 4c of the block: fragment slots 2c, 2c + 1, 2c + 8,
// 2c + 9 hold elements 4c .. 4c + 3 (a dot product does not care in which order its terms pair
// up, only that A and B agree).
//
// Pre-split activations (MatvecContext::split_scratch): splitting x into its bf16 parts is most of
// the kernel's work when every 16-row tile splits it again (Nsight Compute, 35B-A3B qkv at 64
// rows: the splits' FADD / F2FP / shifts were ~55% of 36 M instructions, and the loads that fed
// them half the stall samples). Launches of many multiply-adds therefore first split each
// activation matrix once (split_x_kernel) into a scratch laid out in fragment order, [row][block][lane
// quad c][part lo, mid, hi][8 bf16: elements 4c..4c+3, 16+4c..16+4c+3], so a lane's B fragments
// of a block are three 16-byte loads. The parts are the same bits either way (split_pair), so
// results do not depend on whether a launch pre-split.
//
// Batch invariance: an activation row's outputs depend on its own values only: each tile
// column is its own dot product in the tensor core, the column's mma sequence does not depend
// on NT or on its neighbours, and the K split depends on the matrix's shape only. Row r alone is
// bit-identical to row r in any group, as in the CUDA-core kernel, but the two kernels differ
// from each other in the last bits: the math is chosen per backend (MatvecContext::math).

#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/matmul/matvec_seg.h"
#include "kernels/gpu/mma_bf16.h"

namespace deltaserve::kernels {
namespace {

using matvec::MatvecParams;
using matvec::MatvecSeg;
#if defined(DS_MMA_BF16)
using gpu::mma::Q4_0Fragments;
using gpu::mma::SplitPair;
#endif

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerTile = 16;   // weight rows per tile: one mma's M
constexpr int kColsPerTile = 8;    // activation rows per mma: N
constexpr int64_t kMaxGridY = 65535;

#if defined(DS_MMA_BF16)
constexpr int kQ4_0Bytes = 18;

// Tile `tile`'s weight rows for lane rows g and g + 8 (clamped to the last row, so loads stay
// in the matrix; such outputs are not written).
struct LaneRows {
  const uint8_t* row_g;
  const uint8_t* row_g8;
  int64_t out_g;   // output of A row g (gated: also of A row g + 8)
  int64_t out_g8;  // plain: output of A row g + 8
};

__device__ __forceinline__ LaneRows lane_rows(const MatvecSeg& g, int64_t tile, int lane_group) {
  const uint8_t* w = g.w;
  const uint8_t* w_up = g.w_up;
  LaneRows lr;
  if (w_up != nullptr) {
    lr.out_g = tile * (kRowsPerTile / 2) + lane_group;
    lr.out_g8 = lr.out_g;
    const size_t o = static_cast<size_t>(min(lr.out_g, g.num_out - 1)) * g.w_row_bytes;
    lr.row_g = w + o;
    lr.row_g8 = w_up + o;
  } else {
    lr.out_g = tile * kRowsPerTile + lane_group;
    lr.out_g8 = lr.out_g + 8;
    lr.row_g = w + static_cast<size_t>(min(lr.out_g, g.num_out - 1)) * g.w_row_bytes;
    lr.row_g8 = w + static_cast<size_t>(min(lr.out_g8, g.num_out - 1)) * g.w_row_bytes;
  }
  return lr;
}

// Column `col` of row group `group`: its activation row (x and y), or -1 past the rows.
template <int64_t kGroupRows>
__device__ __forceinline__ int64_t column_row(const MatvecSeg& g, int64_t group, int col) {
  const int64_t row = group * kGroupRows + col;
  return col < kGroupRows && row < g.num_rows ? row : -1;
}

// One row group of the block's segment. Every thread of the block calls it (barriers inside).
template <int NT, bool kNorm, bool kSplit>
__device__ __forceinline__ void mma_group(const MatvecSeg& g, int64_t group, float (&partial)[kWarps][NT][32][4]) {
  constexpr int64_t kGroupRows = NT * kColsPerTile;
  const int lane = gpu::lane_id(), warp = gpu::warp_id();
  const int lane_group = lane >> 2, lane_quad = lane & 3;
  const int64_t row0 = group * kGroupRows;
  const int num_valid = static_cast<int>(min(kGroupRows, g.num_rows - row0));
  const int num_tiles = (num_valid + kColsPerTile - 1) / kColsPerTile;
  // Warp = (row tile, K slice): the block's 8 / S tiles of 16 weight rows, S slices each.
  const int slices = g.mma_k_slices, tiles_per_block = kWarps / slices;
  const int row_tile = warp / slices, slice = warp % slices;
  const int64_t first_tile = (static_cast<int64_t>(blockIdx.x) - g.block_begin) * tiles_per_block;

  const LaneRows lr = lane_rows(g, first_tile + row_tile, lane_group);

  const int64_t num_blocks = g.num_in / 32;
  // This lane's activation row in each tile (column lane_group); null past the group's columns.
  // kSplit: its parts in the pre-split scratch instead (12 uint4 per row and block, 3 per lane
  // quad), from one pointer (rows t * 8 apart), live for tiles whose row is below num_valid.
  const float* xs[NT];
  const uint4* xp = nullptr;
  const int64_t xp_tile_stride = 8 * num_blocks * 12;
  if constexpr (kSplit) {
    xp = static_cast<const uint4*>(g.x_split) + (row0 + lane_group) * num_blocks * 12 + 3 * lane_quad;
  } else {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int64_t row = column_row<kGroupRows>(g, group, t * kColsPerTile + lane_group);
      xs[t] = row >= 0 ? g.x + row * g.x_stride + 4 * lane_quad : nullptr;
    }
  }

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  const int64_t kb_begin = num_blocks * slice / slices, kb_end = num_blocks * (slice + 1) / slices;
#pragma unroll 2
  for (int64_t kb = kb_begin; kb < kb_end; ++kb) {
    const uint8_t* blk_g = lr.row_g + kQ4_0Bytes * kb;
    const uint8_t* blk_g8 = lr.row_g8 + kQ4_0Bytes * kb;
    const float d_g = gpu::f16_bits_to_float(*reinterpret_cast<const uint16_t*>(blk_g));
    const float d_g8 = gpu::f16_bits_to_float(*reinterpret_cast<const uint16_t*>(blk_g8));
    const uint32_t q_g = gpu::load_u32_align2(blk_g + 2 + 4 * lane_quad);
    const uint32_t q_g8 = gpu::load_u32_align2(blk_g8 + 2 + 4 * lane_quad);
    const Q4_0Fragments a = gpu::mma::q4_0_fragments(q_g, q_g8);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= num_tiles) continue;
      uint32_t b_lo[3][2], b_hi[3][2];
      if constexpr (kSplit) {
        uint4 part[3] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
        if (t * kColsPerTile + lane_group < num_valid) {
          const uint4* at = xp + t * xp_tile_stride + 12 * kb;
          part[0] = at[0], part[1] = at[1], part[2] = at[2];
        }
#pragma unroll
        for (int q = 0; q < 3; ++q) b_lo[q][0] = part[q].x, b_lo[q][1] = part[q].y, b_hi[q][0] = part[q].z, b_hi[q][1] = part[q].w;
      } else {
        float4 xa = make_float4(0.0f, 0.0f, 0.0f, 0.0f), xb = xa;
        if (xs[t] != nullptr) {
          xa = *reinterpret_cast<const float4*>(xs[t] + 32 * kb);
          xb = *reinterpret_cast<const float4*>(xs[t] + 32 * kb + 16);
        }
        const SplitPair lo0 = gpu::mma::split_pair(xa.x, xa.y), lo1 = gpu::mma::split_pair(xa.z, xa.w);
        const SplitPair hi0 = gpu::mma::split_pair(xb.x, xb.y), hi1 = gpu::mma::split_pair(xb.z, xb.w);
        b_lo[0][0] = lo0.lo, b_lo[0][1] = lo1.lo, b_lo[1][0] = lo0.mid, b_lo[1][1] = lo1.mid, b_lo[2][0] = lo0.hi, b_lo[2][1] = lo1.hi;
        b_hi[0][0] = hi0.lo, b_hi[0][1] = hi1.lo, b_hi[1][0] = hi0.mid, b_hi[1][1] = hi1.mid, b_hi[2][0] = hi0.hi, b_hi[2][1] = hi1.hi;
      }
      gpu::mma::q4_0_block_mma(acc[t], a, b_lo, b_hi, d_g, d_g8);
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[warp][t][lane][j] = acc[t][j];
  }
  __syncthreads();

  // Warps take the (row tile, column tile) items in turn: the K slices' sums added in slice
  // order, then written.
  const bool gated = g.w_up != nullptr;
  for (int item = warp; item < tiles_per_block * num_tiles; item += kWarps) {
    const int rt = item % tiles_per_block, t = item / tiles_per_block;
    const LaneRows out = lane_rows(g, first_tile + rt, lane_group);
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float sum = partial[rt * slices][t][lane][j];
      for (int k = 1; k < slices; ++k) sum += partial[rt * slices + k][t][lane][j];
      v[j] = sum;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t row = column_row<kGroupRows>(g, group, t * kColsPerTile + 2 * lane_quad + j);
      if (row < 0) continue;
      float* y = g.y + row * g.y_stride;
      if (gated) {
        // swiglu_gpu's expression, as the CUDA-core kernel's gated segments.
        const float gate = v[j];
        if (out.out_g < g.num_out) y[out.out_g] = gate / (1.0f + expf(-gate)) * v[2 + j];
        continue;
      }
      if (out.out_g < g.num_out) y[out.out_g] = g.accumulate ? y[out.out_g] + v[j] : v[j];
      if (out.out_g8 < g.num_out) y[out.out_g8] = g.accumulate ? y[out.out_g8] + v[2 + j] : v[2 + j];
    }
  }
  if constexpr (kNorm) {
    gpu::fence_acq_rel_device();  // every lane wrote y: visible device-wide before the block counts itself done
    matvec::norm_epilogue(g, group, row0, num_valid, gridDim.x);
  }
}
#endif

// Blocks per multiprocessor the register budget allows (launch bounds): one or two column tiles
// fit 64 registers, so 4 blocks of 8 warps share a multiprocessor (the latency-bound few-row
// case wants the warps); 4 and 8 tiles take up to 128, but 4 tiles with pre-split activations
// (no split temporaries) fit 80, 3 blocks (8 tiles would spill there).
template <int NT, bool kSplit>
constexpr int min_blocks_per_sm() {
  return NT <= 2 ? 4 : (kSplit && NT == 4 ? 3 : 2);
}

// Block (x, y): x the segment's row tiles, y the row group of 8 * NT activation rows.
template <int NT, bool kNorm, bool kSplit>
__global__ void __launch_bounds__(kThreads, (min_blocks_per_sm<NT, kSplit>())) matvec_mma_kernel(const MatvecParams p) {
#if defined(DS_MMA_BF16)
  const MatvecSeg g = matvec::segment_of(p);
  if (p.prefetch_weights && p.group_offset == 0 && blockIdx.y == 0)
    matvec::prefetch_block_weights(g, g.w, g.w_up, kRowsPerTile * (kWarps / g.mma_k_slices));
  gpu::begin_kernel();
  __shared__ float partial[kWarps][NT][32][4];
  const int64_t group = p.group_offset + blockIdx.y;
  if (group >= g.num_groups) return;
  mma_group<NT, kNorm, kSplit>(g, group, partial);
#else
  gpu::begin_kernel();
  (void)p;  // never launched there: matvec_math_on_device gives kCudaCores without bf16 mma
#endif
}

// Activation rows [0, num_rows) of x split into bf16 parts, in the scratch layout above: thread
// (row, block, lane quad c) splits the 8 elements lane c of an mma reads (4c.., 16 + 4c..).
__global__ void __launch_bounds__(256) split_x_kernel(const float* x, int64_t x_stride, int64_t num_rows, int64_t num_blocks,
                                                      uint4* out) {
  gpu::begin_kernel();
#if defined(DS_MMA_BF16)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_rows * num_blocks * 4) return;
  const int c = static_cast<int>(i & 3);
  const int64_t row_block = i >> 2, row = row_block / num_blocks, kb = row_block % num_blocks;
  const float* at = x + row * x_stride + 32 * kb + 4 * c;
  const float4 xa = *reinterpret_cast<const float4*>(at), xb = *reinterpret_cast<const float4*>(at + 16);
  const SplitPair lo0 = gpu::mma::split_pair(xa.x, xa.y), lo1 = gpu::mma::split_pair(xa.z, xa.w);
  const SplitPair hi0 = gpu::mma::split_pair(xb.x, xb.y), hi1 = gpu::mma::split_pair(xb.z, xb.w);
  uint4* o = out + row_block * 12 + 3 * c;
  o[0] = make_uint4(lo0.lo, lo1.lo, hi0.lo, hi1.lo);
  o[1] = make_uint4(lo0.mid, lo1.mid, hi0.mid, hi1.mid);
  o[2] = make_uint4(lo0.hi, lo1.hi, hi0.hi, hi1.hi);
#else
  (void)x, (void)x_stride, (void)num_rows, (void)num_blocks, (void)out;  // never launched there
#endif
}

// Row tiles of a segment: matvec::mma_row_tiles (16 weight rows each).
static_assert(kRowsPerTile == 16);
using matvec::mma_row_tiles;

// K slices per row tile, from the matrix's shape only (the slices' sums are added in slice
// order, so the split must not follow the rows): 8, but 4 past 4,096 tiles (65,536 outputs:
// the lm head), where the warps are plenty and shorter walks only add reductions (measured
// against 4 everywhere: 8 faster on every shape but the lm head's single row, bench/RESULTS.md).
int k_slices(const MatvecSeg& g) { return mma_row_tiles(g) <= 4096 ? 8 : 4; }

int64_t segment_blocks(const MatvecSeg& g) {
  const int64_t tiles_per_block = kWarps / k_slices(g);
  return (mma_row_tiles(g) + tiles_per_block - 1) / tiles_per_block;
}

template <int NT, bool kNorm, bool kSplit>
gpuError_t launch_tiles(MatvecParams p, gpuStream_t stream) {
  constexpr int64_t kGroupRows = NT * kColsPerTile;
  int64_t grid_x = 0, num_groups = 0;
  bool small_matrices = true;
  for (int s = 0; s < p.num_segs; ++s) {
    MatvecSeg& g = p.seg[s];
    g.num_groups = (g.num_rows + kGroupRows - 1) / kGroupRows;
    g.block_begin = grid_x;
    g.mma_k_slices = k_slices(g);
    grid_x += segment_blocks(g);
    num_groups = g.num_groups > num_groups ? g.num_groups : num_groups;
    small_matrices = small_matrices && static_cast<size_t>(g.num_out) * g.w_row_bytes <= matvec::kPrefetchMaxMatrixBytes;
  }
  p.prefetch_weights = NT == 1 && num_groups <= 32 && small_matrices;
  for (int64_t first = 0; first < num_groups; first += kMaxGridY) {
    p.group_offset = first;
    const dim3 grid(static_cast<unsigned>(grid_x),
                    static_cast<unsigned>(num_groups - first < kMaxGridY ? num_groups - first : kMaxGridY));
    gpu::launch(matvec_mma_kernel<NT, kNorm, kSplit>, grid, kThreads, 0, stream, p);
  }
  return gpuGetLastError();
}

// Largest tile count per row group; results do not depend on it.
constexpr int kMaxTiles = 8;

#if defined(DS_GPU_CUDA)
// An attribute of the calling thread's device, or `fallback` where it cannot be read (no
// device yet: the caller's own calls report that).
int device_attribute(cudaDeviceAttr attribute, int fallback) {
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return fallback;
  }
  return value;
}
#endif

using matvec::multiprocessors;

// Launches of at least this many multiply-adds (weights x activation rows, over the segments)
// pre-split: the split launch costs a few microseconds, which small launches do not earn back.
// With every launch of 9+ rows pre-split the 27B at 64 rows and the 35B-A3B's verify rows
// gained while the 35B-A3B at 16 and 64 rows (launches of up to 1.6 G multiply-adds) lost
// (bench/RESULTS.md), hence a line of 2^31 between them. The rule reads the launch's shape only.
constexpr int64_t kPresplitMinMacs = int64_t{1} << 31;

// Splits each segment's activations into the scratch (segments that share x, num_in and rows
// share one split) and points the segments at them; false, with nothing launched, when the
// scratch is missing or too small for the launch (the kernel then splits as it goes). Each
// split launch adds one to *context.split_launches.
bool presplit(MatvecParams& p, const MatvecContext& context, gpuStream_t stream) {
  if (context.split_scratch == nullptr) return false;
  size_t used = 0;
  int first_with[matvec::kMaxSegs];  // the segment whose split segment s reuses, or s
  for (int s = 0; s < p.num_segs; ++s) {
    const MatvecSeg& g = p.seg[s];
    first_with[s] = s;
    for (int t = 0; t < s; ++t) {
      const MatvecSeg& h = p.seg[t];
      if (h.x == g.x && h.x_stride == g.x_stride && h.num_in == g.num_in && h.num_rows == g.num_rows) {
        first_with[s] = t;
        break;
      }
    }
    if (first_with[s] == s) used += matvec_split_scratch_bytes(g.num_rows, g.num_in);
  }
  if (used > context.split_scratch_bytes) return false;
  unsigned char* next = static_cast<unsigned char*>(context.split_scratch);
  for (int s = 0; s < p.num_segs; ++s) {
    MatvecSeg& g = p.seg[s];
    if (first_with[s] != s) {
      g.x_split = p.seg[first_with[s]].x_split;
      continue;
    }
    g.x_split = next;
    const int64_t num_blocks = g.num_in / 32, threads = g.num_rows * num_blocks * 4;
    gpu::launch(split_x_kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), 256, 0, stream, g.x, g.x_stride, g.num_rows,
                num_blocks, reinterpret_cast<uint4*>(next));
    if (context.split_launches != nullptr) ++*context.split_launches;
    next += matvec_split_scratch_bytes(g.num_rows, g.num_in);
  }
  return true;
}

// Tiles per row group: enough for the plain segments' rows, halved while the launch would
// have fewer than two blocks per multiprocessor (a matrix of few outputs at many rows: its
// weights are then read once per group, from L2). Results do not depend on it.
template <bool kNorm>
gpuError_t launch_mma(const MatvecParams& p, const MatvecContext& context, gpuStream_t stream) {
  int64_t n = 0, blocks = 0, macs = 0;
  for (int s = 0; s < p.num_segs; ++s) {
    const MatvecSeg& g = p.seg[s];
    n = g.num_rows > n ? g.num_rows : n;
    blocks += segment_blocks(g);
    macs += g.num_out * g.num_in * g.num_rows * (g.w_up != nullptr ? 2 : 1);
  }
  int tiles = 1;
  while (tiles < kMaxTiles && tiles * kColsPerTile < n) tiles *= 2;
  while (tiles > 1 && blocks * ((n + tiles * kColsPerTile - 1) / (tiles * kColsPerTile)) < 2 * multiprocessors()) tiles /= 2;
  MatvecParams q = p;
  const int64_t min_macs = context.split_min_macs >= 0 ? context.split_min_macs : kPresplitMinMacs;
  if (macs >= min_macs && presplit(q, context, stream)) {
    switch (tiles) {
      case 1: return launch_tiles<1, kNorm, true>(q, stream);
      case 2: return launch_tiles<2, kNorm, true>(q, stream);
      case 4: return launch_tiles<4, kNorm, true>(q, stream);
      default: return launch_tiles<8, kNorm, true>(q, stream);
    }
  }
  switch (tiles) {
    case 1: return launch_tiles<1, kNorm, false>(p, stream);
    case 2: return launch_tiles<2, kNorm, false>(p, stream);
    case 4: return launch_tiles<4, kNorm, false>(p, stream);
    default: return launch_tiles<8, kNorm, false>(p, stream);
  }
}

// Asked once, of the first caller's device, and never written again (the backend and the
// tests use one device per process).
bool device_has_bf16_mma() {
#if defined(DS_GPU_CUDA)
  static const bool has = device_attribute(cudaDevAttrComputeCapabilityMajor, 0) >= 8;
  return has;
#else
  return false;
#endif
}

}  // namespace

size_t matvec_split_scratch_bytes(int64_t num_rows, int64_t num_in) {
  return static_cast<size_t>(num_rows) * static_cast<size_t>(num_in / 32) * 192;
}

MatvecMath matvec_math_on_device(MatvecMath math) { return device_has_bf16_mma() ? math : MatvecMath::kCudaCores; }

bool tensor_matvec_available() { return device_has_bf16_mma(); }

namespace matvec {
// Asked once, like device_has_bf16_mma, and never written again.
int multiprocessors() {
#if defined(DS_GPU_CUDA)
  static const int count = device_attribute(cudaDevAttrMultiProcessorCount, 132);
  return count;
#else
  return 64;  // HIP: never launched (matvec_math_on_device gives kCudaCores there)
#endif
}

gpuError_t launch_q4_0_mma(const MatvecParams& p, const MatvecContext& context, gpuStream_t stream) {
  return p.seg[0].norm_counters != nullptr ? launch_mma<true>(p, context, stream) : launch_mma<false>(p, context, stream);
}
}  // namespace matvec

}  // namespace deltaserve::kernels
