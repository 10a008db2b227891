// The fused MoE down products + combine for decode rows (moe_down_combine_gpu.h).
//
// Block (x, y): the 16 outputs 16x .. 16x + 15 of token row y. Its sources are walked in this
// order: the shared expert's chunks (its weights need nothing from the router, so the block
// asks L2 for them before the grid dependency wait), then rank 0's expert's, rank 1's, ...
// Each chunk is matmul_mma_staged.cu's chunk of a 16-row tile with one activation row, and
// warp w does what that kernel's warp w does with it (matvec_staged.h: the same blocks B w ..
// B w + B - 1, the same split, two mma per block, the same fma chain over a source's chunks in
// order), but each warp stages only its own blocks' bytes and activations through its own
// cp.async ring, so the walk needs no block barrier; each chunk's addresses and source come
// from a table the block fills once (ChunkInfo), so the walk does no integer division. Why both:
// at one token row the block is alone on its multiprocessor and its time is its warps'
// instruction chains (with a barrier per chunk, or a division per chunk for its source, the
// fused launch was slower than the two launches it replaces; bench/RESULTS.md). At a source's last chunk each warp stores its sums of the
// three part columns; after the walk the block adds them as the staged kernel's epilogue does
// (warps in order, then (lo + mid) + hi), which is that expert's down output exactly as the
// two-launch path writes it, and combines the sources as moe_combine_gpu does.
#include <atomic>
#include <cstdint>

#include "kernels/gpu/async_copy.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matvec_staged.h"
#include "kernels/moe/moe_down_combine_gpu.h"
#include "kernels/norm/norm_block.h"

namespace deltaserve::kernels {
namespace {

using staged::Chunk;
using staged::kThreads;
using staged::kTileRows;
using staged::kWarps;

constexpr int kMaxUsed = 32;
constexpr int64_t kMaxGridY = 65535;
constexpr int kPartialPerWarp = kTileRows * 3;  // a source's sums of one warp: 16 outputs x 3 parts

// A warp's share of a chunk: its B blocks of each of the 16 rows, bytes [18 B w, 18 B (w + 1))
// of the row's chunk, copied as the 16-byte units covering them.
template <int B>
struct WarpChunk {
  __host__ __device__ static constexpr int first_unit(int w) { return 18 * B * w / 16; }
  __host__ __device__ static constexpr int units(int w) { return (18 * B * (w + 1) + 15) / 16 - first_unit(w); }
  __host__ __device__ static constexpr int max_units() {
    int m = 0;
    for (int w = 0; w < kWarps; ++w) m = units(w) > m ? units(w) : m;
    return m;
  }
  static constexpr int kUnits = max_units();
  // Rows an odd number of 16-byte units apart: the 8 rows a lane quad reads start 4 banks apart.
  static constexpr int kRowStride = 16 * (kUnits % 2 == 1 ? kUnits : kUnits + 1);
  static constexpr int kStageBytes = kTileRows * kRowStride;
  static constexpr int kCopiesPerLane = (kTileRows * kUnits + 31) / 32;
  static constexpr int kSplitBytes = B * 3 * 4 * 16;  // the warp's blocks of one chunk, split
};

// Chunks in flight per warp. One token row: deep (every chunk of the 35B-A3B's nine 512-input
// sources), since the block is alone on its multiprocessor and each refill of the ring waits a
// full trip to memory; more rows: shallower, so two blocks share a multiprocessor. Timing only.
template <int B>
__host__ __device__ constexpr int stages_for(bool one_row) {
  return B == 1 ? (one_row ? 24 : 8) : (one_row ? 8 : 4);
}

// Chunk c of the walk, worked out once per block (a division and the expert id) so the walk
// itself only looks it up: its weight bytes (row 0's chunk), its activations (this token row's
// chunk), its source slot (rank, or k for the shared expert) and whether it ends the source.
struct ChunkInfo {
  const uint8_t* w;
  const float* x;
  int source;
  int last;
};

// The block's dynamic shared memory: per warp [stages][stage bytes], per warp [chunks][split],
// [sources][warps][16 x 3] f32 sums, then [chunks] ChunkInfo.
struct Layout {
  int shared_chunks = 0;  // the shared expert's chunks (walked first)
  int expert_chunks = 0;  // chunks per routed expert
  int total_chunks = 0;
  int sources = 0;        // k, + 1 with the shared expert
  size_t split_offset = 0, partial_offset = 0, table_offset = 0, bytes = 0;
};

template <int B, int S>
__host__ __device__ Layout layout_of(const MoeDownCombineArgs& a) {
  using W = WarpChunk<B>;
  Layout l;
  const bool shared = a.down_shexp != nullptr;
  l.shared_chunks = shared ? static_cast<int>(a.sh_in / Chunk<B>::kInputs) : 0;
  l.expert_chunks = static_cast<int>(a.exp_in / Chunk<B>::kInputs);
  l.total_chunks = l.shared_chunks + static_cast<int>(a.num_used) * l.expert_chunks;
  l.sources = static_cast<int>(a.num_used) + (shared ? 1 : 0);
  l.split_offset = static_cast<size_t>(kWarps) * S * W::kStageBytes;
  l.partial_offset = l.split_offset + static_cast<size_t>(kWarps) * l.total_chunks * W::kSplitBytes;
  l.table_offset = l.partial_offset + static_cast<size_t>(l.sources) * kWarps * kPartialPerWarp * sizeof(float);
  l.bytes = l.table_offset + static_cast<size_t>(l.total_chunks) * sizeof(ChunkInfo);
  return l;
}

#if defined(DS_MMA_BF16)
constexpr int kXBatch = 4;  // activation items a lane loads before splitting them

// Chunk c's ChunkInfo (thread c of the block, before the walk). The routed experts' ids come
// from the router's output (after the grid dependency wait).
__device__ __forceinline__ ChunkInfo chunk_info(const MoeDownCombineArgs& a, const Layout& l, int64_t r, int c, int chunk_inputs,
                                                int seg_bytes) {
  const int k = static_cast<int>(a.num_used);
  ChunkInfo ci;
  if (c < l.shared_chunks) {
    ci.w = a.down_shexp + static_cast<size_t>(c) * seg_bytes;
    ci.x = a.sh_g + r * a.sh_in + static_cast<int64_t>(c) * chunk_inputs;
    ci.source = k;
    ci.last = c == l.shared_chunks - 1;
    return ci;
  }
  const int e = c - l.shared_chunks, rank = e / l.expert_chunks, within = e - rank * l.expert_chunks;
  const int32_t id = a.expert_ids[r * k + rank];
  ci.w = a.down_exps + static_cast<size_t>(id) * a.expert_bytes + static_cast<size_t>(within) * seg_bytes;
  ci.x = a.exp_g + (r * k + rank) * a.exp_in + static_cast<int64_t>(within) * chunk_inputs;
  ci.source = rank;
  ci.last = within == l.expert_chunks - 1;
  return ci;
}

// The walk of this warp, then the block's sums and combine (thread i < 16: output 16 x + i).
// rank_w: the row's routing weights in shared memory (written by threads < k before the call).
template <int B, int S>
__device__ __forceinline__ void down_combine_block(const MoeDownCombineArgs& a, int64_t r, uint8_t* smem, const float* rank_w,
                                                   float* values) {
  using C = Chunk<B>;
  using W = WarpChunk<B>;
  const Layout l = layout_of<B, S>(a);
  const int tid = static_cast<int>(threadIdx.x), lane = gpu::lane_id(), warp = gpu::warp_id();
  const int k = static_cast<int>(a.num_used);
  const int64_t tile = blockIdx.x;
  const int block0 = warp * B, unit0 = W::first_unit(warp), my_units = W::units(warp);
  uint8_t* stages = smem + static_cast<size_t>(warp) * S * W::kStageBytes;
  uint4* split = reinterpret_cast<uint4*>(smem + l.split_offset + static_cast<size_t>(warp) * l.total_chunks * W::kSplitBytes);
  float* partial = reinterpret_cast<float*>(smem + l.partial_offset);
  ChunkInfo* table = reinterpret_cast<ChunkInfo*>(smem + l.table_offset);

  // This lane's 16-byte copies of a chunk: (tile row, unit), fixed for the walk, as byte offsets
  // from the chunk's row-0 bytes in an expert's matrix and in the shared expert's.
  int copy_dst[W::kCopiesPerLane];
  size_t copy_exp[W::kCopiesPerLane], copy_sh[W::kCopiesPerLane];
#pragma unroll
  for (int j = 0; j < W::kCopiesPerLane; ++j) {
    const int u = lane + 32 * j;
    const bool used = u < kTileRows * W::kUnits && u % W::kUnits < my_units;
    const int row = u / W::kUnits, unit = u % W::kUnits;
    const size_t out = static_cast<size_t>(min(tile * kTileRows + row, a.n - 1));  // clamped: loads stay in the matrix
    copy_dst[j] = used ? row * W::kRowStride + 16 * unit : -1;
    copy_exp[j] = out * a.exp_row_bytes + 16 * (unit0 + unit);
    copy_sh[j] = out * a.sh_row_bytes + 16 * (unit0 + unit);
  }
  auto issue_at = [&](int c, const uint8_t* w, bool shared) {
    uint8_t* stage = stages + (c % S) * W::kStageBytes;
#pragma unroll
    for (int j = 0; j < W::kCopiesPerLane; ++j) {
      if (copy_dst[j] >= 0) gpu::async_copy16(stage + copy_dst[j], w + (shared ? copy_sh[j] : copy_exp[j]));
    }
  };
  auto issue = [&](int c) { issue_at(c, table[c].w, table[c].source == k); };

  // The shared expert's first stages go out at once (their addresses need no table); the table
  // (expert ids from the router) after the barrier.
  const int prologue = min(S - 1, l.total_chunks);
  for (int s = 0; s < min(prologue, l.shared_chunks); ++s) {
    issue_at(s, a.down_shexp + static_cast<size_t>(s) * C::kSegBytes, true);
    gpu::async_commit();
  }
  for (int c = tid; c < l.total_chunks; c += kThreads) table[c] = chunk_info(a, l, r, c, C::kInputs, C::kSegBytes);
  __syncthreads();  // the table and the rank weights
  for (int s = min(prologue, l.shared_chunks); s < S - 1; ++s) {
    if (s < l.total_chunks) issue(s);
    gpu::async_commit();
  }

  // Activation item (chunk c, block j of the warp's, quad q): the 8 inputs quad q of an mma
  // reads, split into this warp's split memory.
  constexpr int kItemsPerChunk = B * 4;
  const int total_items = l.total_chunks * kItemsPerChunk;
  for (int first = 0; first < total_items; first += 32 * kXBatch) {
    float4 xa[kXBatch], xb[kXBatch];
#pragma unroll
    for (int u = 0; u < kXBatch; ++u) {
      const int item = first + 32 * u + lane;
      if (item < total_items) {
        const float* at = table[item / kItemsPerChunk].x + 32 * (block0 + (item / 4) % B) + 4 * (item % 4);
        xa[u] = *reinterpret_cast<const float4*>(at);
        xb[u] = *reinterpret_cast<const float4*>(at + 16);
      }
    }
#pragma unroll
    for (int u = 0; u < kXBatch; ++u) {
      const int item = first + 32 * u + lane;
      if (item < total_items) staged::split_quad(xa[u], xb[u], split + (item / 4) * 12 + item % 4);
    }
  }

  // Lane (g, q) holds column g of the one column tile: part g of the row (g < 3), else unread sums.
  const int lane_group = lane >> 2, lane_quad = lane & 3;
  const int split_at[1] = {lane_group < 3 ? lane_group * 4 + lane_quad : staged::split_at_past(lane_quad)};
  float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  for (int c = 0; c < l.total_chunks; ++c) {
    if (c + S - 1 < l.total_chunks) issue(c + S - 1);
    gpu::async_commit();
    gpu::async_wait<S - 1>();
    gpu::sync_warp();  // chunk c's bytes (every lane's copies) and, the first time, the split
    staged::chunk_products<B, 1, W::kRowStride>(stages + (c % S) * W::kStageBytes, split + c * B * 12, split_at, acc,
                                                16 * unit0, 12 * block0);
    if (table[c].last) {
      // C[i][n]: lane (i % 8) * 4 + n / 2, element (i >= 8 ? 2 : 0) + n % 2; columns n < 3 kept.
      float* mine = partial + (table[c].source * kWarps + warp) * kPartialPerWarp;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = lane_group + (e >= 2 ? 8 : 0), n = 2 * lane_quad + (e & 1);
        if (n < 3) mine[i * 3 + n] = acc[0][e];
        acc[0][e] = 0.0f;
      }
    }
    gpu::sync_warp();  // the stage is rewritten S - 1 chunks on
  }
  gpu::async_wait<0>();  // only empty groups remain
  __syncthreads();       // every warp's sums

  // Each source's output i (thread src * 16 + i), then thread i combines them.
  for (int t = tid; t < l.sources * kTileRows; t += kThreads) {
    const int src = t / kTileRows, i = t % kTileRows;
    const float* p = partial + src * kWarps * kPartialPerWarp + i * 3;
    values[t] = staged::parts_value([&](int part) {
      float v = p[part];
      for (int w = 1; w < kWarps; ++w) v += p[w * kPartialPerWarp + part];
      return v;
    });
  }
  __syncthreads();
  if (tid < kTileRows) {
    const int i = tid;
    // moe_combine_gpu's sum: products and sums rounded one by one, rank order, shared last.
    float sum = 0.0f;
    for (int rank = 0; rank < k; ++rank) sum = __fadd_rn(sum, __fmul_rn(rank_w[rank], values[rank * kTileRows + i]));
    if (a.down_shexp != nullptr) {
      const float gate = 1.0f / (1.0f + expf(-a.shared_gate_logit[r]));
      sum = __fadd_rn(sum, __fmul_rn(gate, values[k * kTileRows + i]));
    }
    const int64_t out = tile * kTileRows + i;
    if (out < a.n) {
      float* y = a.y + r * a.n + out;
      *y = a.accumulate ? *y + sum : sum;
    }
  }
}
#endif

template <int B, int S>
__global__ void __launch_bounds__(kThreads) moe_down_combine_kernel(const MoeDownCombineArgs a, int64_t row_offset) {
#if defined(DS_MMA_BF16)
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float rank_w[kMaxUsed];
  __shared__ float values[(kMaxUsed + 1) * kTileRows];  // each source's 16 outputs
  const int64_t r = row_offset + blockIdx.y;
  if (a.down_shexp != nullptr) {  // the tile's shared-expert rows, whole
    const auto row_of = [&](int i) {
      return a.down_shexp + static_cast<size_t>(min(static_cast<int64_t>(blockIdx.x) * kTileRows + i, a.n - 1)) * a.sh_row_bytes;
    };
    staged::prefetch_tile_rows(row_of, static_cast<int64_t>(a.sh_row_bytes), static_cast<int>((a.sh_row_bytes + 127) / 128) + 1);
  }
  gpu::begin_kernel();
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < a.num_used) rank_w[tid] = a.expert_weights[r * a.num_used + tid];
  down_combine_block<B, S>(a, r, smem, rank_w, values);
  if (a.norm_w == nullptr) return;
  // The norm epilogue: the row's last block to finish normalises it (moe_combine_gpu's bits).
  __shared__ unsigned last;
  __shared__ float scratch[detail::kNormMaxThreads / gpu::kWarpSize];
  if (tid < kTileRows) gpu::fence_acq_rel_device();  // this block's y visible device-wide before the count
  __syncthreads();
  if (tid == 0) last = atomicAdd(a.norm_counters + r, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  gpu::fence_acq_rel_device();
  float* out = a.norm_out + r * a.norm_out_stride;
  if (detail::norm_rows_cacheable(a.n)) {
    detail::block_rms_norm_rows_as_norm_gpu<1>(a.y + r * a.n, a.n, 1, a.norm_w, out, a.norm_out_stride, a.n, a.norm_eps, scratch);
  } else {
    detail::block_rms_norm_as_norm_gpu(a.y + r * a.n, a.norm_w, out, a.n, a.norm_eps, scratch);
  }
  if (tid == 0) a.norm_counters[r] = 0;  // ready for the next launch (graph replays too)
#else
  gpu::begin_kernel();
  (void)a, (void)row_offset;  // never launched: moe_down_combine_supported is false
#endif
}

// The largest dynamic shared memory a block may opt into on the current device (0 on error).
// Cached per device: a device attribute, stored once and never changed.
size_t max_shared_optin() {
#if defined(DS_GPU_CUDA)
  static std::atomic<int> cached[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (device < 64 && cached[device].load(std::memory_order_relaxed) > 0) return static_cast<size_t>(cached[device].load());
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return 0;
  if (device < 64) cached[device].store(bytes, std::memory_order_relaxed);
  return static_cast<size_t>(bytes);
#else
  return 0;
#endif
}

// Static shared memory of the kernel beside the dynamic part (rank weights, the sources'
// outputs, norm scratch, flag).
constexpr size_t kStaticSharedBytes = (kMaxUsed + (kMaxUsed + 1) * kTileRows) * 4 + detail::kNormMaxThreads / 32 * 4 + 16;

template <int B, int S>
gpuError_t launch(const MoeDownCombineArgs& a, gpuStream_t stream) {
  static std::atomic<uint64_t> smem_allowed{0};  // as in matmul_mma_staged.cu: bits only ever added
  const size_t optin = max_shared_optin();
  const gpuError_t allowed = staged::allow_dynamic_smem(moe_down_combine_kernel<B, S>, optin - kStaticSharedBytes, smem_allowed);
  if (allowed != gpuSuccess) return allowed;
  const size_t bytes = layout_of<B, S>(a).bytes;
  const unsigned tiles = static_cast<unsigned>((a.n + kTileRows - 1) / kTileRows);
  for (int64_t first = 0; first < a.num_rows; first += kMaxGridY) {
    const dim3 grid(tiles, static_cast<unsigned>(a.num_rows - first < kMaxGridY ? a.num_rows - first : kMaxGridY));
    gpu::launch(moe_down_combine_kernel<B, S>, grid, kThreads, bytes, stream, a, first);
  }
  return gpuGetLastError();
}

// Whether the launch's blocks fit the device's shared memory with S stages per warp.
template <int B, int S>
bool fits(const MoeDownCombineArgs& a) {
  return layout_of<B, S>(a).bytes + kStaticSharedBytes <= max_shared_optin();
}

// The deep ring for one token row where it fits, else the shallow one (timing only).
template <int B>
gpuError_t launch_stages(const MoeDownCombineArgs& a, gpuStream_t stream) {
  constexpr int kDeep = stages_for<B>(true), kShallow = stages_for<B>(false);
  if (a.num_rows == 1 && fits<B, kDeep>(a)) return launch<B, kDeep>(a, stream);
  return launch<B, kShallow>(a, stream);
}

}  // namespace

bool moe_down_combine_supported(const MoeDownCombineArgs& a) {
#if defined(DS_GPU_CUDA)
  if (a.num_used < 1 || a.num_used > kMaxUsed || a.n <= 0 || a.exp_in <= 0 || a.exp_in % Chunk<1>::kInputs != 0) return false;
  if (a.exp_row_bytes % 16 != 0 || a.exp_row_bytes < static_cast<size_t>(a.exp_in / 32 * 18) || a.expert_bytes % 16 != 0 ||
      a.expert_bytes < a.exp_row_bytes * static_cast<size_t>(a.n) || !gpu::aligned16(a.down_exps) || !gpu::aligned16(a.exp_g))
    return false;
  const int b = staged::chunk_blocks_per_warp(a.exp_in);
  if (a.down_shexp != nullptr) {
    // One K walk for both matrices, as the staged launch of the two segments requires.
    if (a.sh_in <= 0 || a.sh_in % Chunk<1>::kInputs != 0 || staged::chunk_blocks_per_warp(a.sh_in) != b) return false;
    if (a.sh_row_bytes % 16 != 0 || a.sh_row_bytes < static_cast<size_t>(a.sh_in / 32 * 18) || !gpu::aligned16(a.down_shexp) ||
        !gpu::aligned16(a.sh_g))
      return false;
  }
  return b == 4 ? fits<4, stages_for<4>(false)>(a) : fits<1, stages_for<1>(false)>(a);
#else
  (void)a;
  return false;
#endif
}

gpuError_t moe_down_combine_gpu(const MoeDownCombineArgs& a, gpuStream_t stream) {
  if (a.num_rows < 0 || !moe_down_combine_supported(a)) return gpuErrorInvalidValue;
  if (a.expert_ids == nullptr || a.expert_weights == nullptr || a.y == nullptr ||
      (a.down_shexp != nullptr && (a.sh_g == nullptr || a.shared_gate_logit == nullptr)))
    return gpuErrorInvalidValue;
  const bool norm = a.norm_w != nullptr;
  if (norm && (a.norm_out == nullptr || a.norm_counters == nullptr || a.norm_out_stride < a.n)) return gpuErrorInvalidValue;
  if (!norm && a.norm_out != nullptr) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  return staged::chunk_blocks_per_warp(a.exp_in) == 4 ? launch_stages<4>(a, stream) : launch_stages<1>(a, stream);
}

}  // namespace deltaserve::kernels
