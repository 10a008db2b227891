// The fused MoE down products + combine for decode rows (moe_down_combine_gpu.h).
//
// Block (x, y): the 16 outputs 16x .. 16x + 15 of token row y. Its sources, walked in this
// order through one ring of S cp.async stages: the shared expert's chunks (its weights need
// nothing from the router, so the block asks L2 for them before the grid dependency wait),
// then rank 0's expert's, rank 1's, ... Each chunk is matmul_mma_staged.cu's chunk of a 16-row
// tile with one activation row (matvec_staged.h: the same split, the same two mma per block,
// the same fma chain per warp over a source's chunks in order). At a source's last chunk each
// warp stores its sums of the three part columns for that source; after the walk, thread i
// adds them as the staged kernel's epilogue does (warps in order, then (lo + mid) + hi), which
// is that expert's down output exactly as the two-launch path writes it, and combines the
// sources as moe_combine_gpu does. Every activation of the row's sources is split into shared
// memory before the walk (one L2 round trip, not one per chunk).
#include <atomic>
#include <cstdint>

#include "kernels/async_copy.h"
#include "kernels/gpu_compat.h"
#include "kernels/matvec_staged.h"
#include "kernels/moe_down_combine_gpu.h"
#include "kernels/norm_block.h"

namespace deltaserve::kernels {
namespace {

using staged::Chunk;
using staged::kThreads;
using staged::kTileRows;
using staged::kWarps;

constexpr int kMaxUsed = 32;
constexpr int64_t kMaxGridY = 65535;
constexpr int kPartialPerWarp = kTileRows * 3;  // a source's sums of one warp: 16 outputs x 3 parts

// Stages in flight: with one 16-row tile of one token row per block the 35B-A3B's step runs one
// block per multiprocessor, so the ring is deep (16 x 2.3 KB of its 512-input rows).
template <int B>
__host__ __device__ constexpr int stages_for() {
  return B == 1 ? 16 : 4;
}

// The block's dynamic shared memory: [stages][stage bytes], [chunks][split of one row's chunk],
// [sources][warps][16 x 3] f32 sums.
struct Layout {
  int shared_chunks = 0;  // the shared expert's chunks (walked first)
  int expert_chunks = 0;  // chunks per routed expert
  int total_chunks = 0;
  int sources = 0;        // k, + 1 with the shared expert
  size_t split_offset = 0, partial_offset = 0, bytes = 0;
};

template <int B>
__host__ __device__ Layout layout_of(const MoeDownCombineArgs& a) {
  using C = Chunk<B>;
  Layout l;
  const bool shared = a.down_shexp != nullptr;
  l.shared_chunks = shared ? static_cast<int>(a.sh_in / C::kInputs) : 0;
  l.expert_chunks = static_cast<int>(a.exp_in / C::kInputs);
  l.total_chunks = l.shared_chunks + static_cast<int>(a.num_used) * l.expert_chunks;
  l.sources = static_cast<int>(a.num_used) + (shared ? 1 : 0);
  l.split_offset = static_cast<size_t>(stages_for<B>()) * C::kStageBytes;
  l.partial_offset = l.split_offset + static_cast<size_t>(l.total_chunks) * C::kSplitBytesPerRow;
  l.bytes = l.partial_offset + static_cast<size_t>(l.sources) * kWarps * kPartialPerWarp * sizeof(float);
  return l;
}

#if defined(DS_MMA_BF16)
constexpr int kXBatch = 4;  // activation items a thread loads before splitting them

// Chunk c of the walk: its source's slot (rank, or k for the shared expert) and its index
// within the source.
__device__ __forceinline__ int source_of(const Layout& l, int k, int c, int& within) {
  if (c < l.shared_chunks) {
    within = c;
    return k;
  }
  const int e = c - l.shared_chunks;
  within = e % l.expert_chunks;
  return e / l.expert_chunks;
}

template <int B, int S>
__device__ __forceinline__ void down_combine_block(const MoeDownCombineArgs& a, int64_t r, uint8_t* smem, const int32_t* ids,
                                                   const float* rank_w) {
  using C = Chunk<B>;
  const Layout l = layout_of<B>(a);
  const int tid = static_cast<int>(threadIdx.x), lane = gpu::lane_id(), warp = gpu::warp_id();
  const int k = static_cast<int>(a.num_used);
  const int64_t tile = blockIdx.x;
  uint4* split4 = reinterpret_cast<uint4*>(smem + l.split_offset);
  float* partial = reinterpret_cast<float*>(smem + l.partial_offset);

  // This thread's 16-byte copies of a chunk: (tile row, unit), fixed for the walk.
  int copy_row[C::kCopiesPerThread], copy_unit[C::kCopiesPerThread];
#pragma unroll
  for (int j = 0; j < C::kCopiesPerThread; ++j) {
    const int u = tid + j * kThreads;
    copy_row[j] = u < kTileRows * C::kUnitsPerRow ? u / C::kUnitsPerRow : -1;
    copy_unit[j] = u % C::kUnitsPerRow;
  }
  auto issue = [&](int c) {
    int within = 0;
    const int src = source_of(l, k, c, within);
    const bool shared = src == k;
    const uint8_t* base = shared ? a.down_shexp : a.down_exps + static_cast<size_t>(ids[src]) * a.expert_bytes;
    const size_t row_bytes = shared ? a.sh_row_bytes : a.exp_row_bytes;
    uint8_t* stage = smem + (c % S) * C::kStageBytes;
#pragma unroll
    for (int j = 0; j < C::kCopiesPerThread; ++j) {
      if (copy_row[j] < 0) continue;
      const int64_t out = min(tile * kTileRows + copy_row[j], a.n - 1);  // clamped: loads stay in the matrix
      gpu::async_copy16(stage + copy_row[j] * C::kRowStride + 16 * copy_unit[j],
                        base + static_cast<size_t>(out) * row_bytes + static_cast<size_t>(within) * C::kSegBytes + 16 * copy_unit[j]);
    }
  };

  // Activation item (chunk c, block b, quad q): the 8 inputs quad q of an mma reads.
  constexpr int kItemsPerChunk = C::kBlocks * 4;
  const int total_items = l.total_chunks * kItemsPerChunk;
  auto item_at = [&](int item) {
    const int c = item / kItemsPerChunk, b = (item / 4) % C::kBlocks, q = item % 4;
    int within = 0;
    const int src = source_of(l, k, c, within);
    const float* row = src == k ? a.sh_g + r * a.sh_in : a.exp_g + (r * k + src) * a.exp_in;
    return row + static_cast<int64_t>(within) * C::kInputs + 32 * b + 4 * q;
  };
  float4 xa[kXBatch], xb[kXBatch];
  auto load_items = [&](int first) {
#pragma unroll
    for (int u = 0; u < kXBatch; ++u) {
      const int item = first + u * kThreads + tid;
      if (item < total_items) {
        const float* at = item_at(item);
        xa[u] = *reinterpret_cast<const float4*>(at);
        xb[u] = *reinterpret_cast<const float4*>(at + 16);
      }
    }
  };
  auto split_items = [&](int first) {
#pragma unroll
    for (int u = 0; u < kXBatch; ++u) {
      const int item = first + u * kThreads + tid;
      if (item < total_items) {
        const int c = item / kItemsPerChunk, b = (item / 4) % C::kBlocks, q = item % 4;
        staged::split_quad(xa[u], xb[u], split4 + (c * C::kBlocks + b) * 12 + q);
      }
    }
  };

  // The shared expert's first stages go out at once; the experts' need the ids (barrier).
  const int prologue = min(S - 1, l.total_chunks);
  for (int s = 0; s < min(prologue, l.shared_chunks); ++s) {
    issue(s);
    gpu::async_commit();
  }
  load_items(0);
  __syncthreads();  // ids and rank weights
  for (int s = min(prologue, l.shared_chunks); s < S - 1; ++s) {
    if (s < l.total_chunks) issue(s);
    gpu::async_commit();
  }
  split_items(0);
  for (int first = kXBatch * kThreads; first < total_items; first += kXBatch * kThreads) {
    load_items(first);
    split_items(first);
  }

  // Lane (g, q) holds column g of the one column tile: part g of the row (g < 3), else zeros.
  const int lane_group = lane >> 2, lane_quad = lane & 3;
  const int split_at[1] = {lane_group < 3 ? lane_group * 4 + lane_quad : -1};
  float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  for (int c = 0; c < l.total_chunks; ++c) {
    if (c + S - 1 < l.total_chunks) issue(c + S - 1);
    gpu::async_commit();
    gpu::async_wait<S - 1>();
    __syncthreads();  // chunk c's weights (every thread's copies) and, the first time, the split
    staged::chunk_products<B, 1>(smem + (c % S) * C::kStageBytes, split4 + c * C::kBlocks * 12, split_at, acc);
    int within = 0;
    const int src = source_of(l, k, c, within);
    const int last_within = src == k ? l.shared_chunks - 1 : l.expert_chunks - 1;
    if (within == last_within) {
      // C[i][n]: lane (i % 8) * 4 + n / 2, element (i >= 8 ? 2 : 0) + n % 2; columns n < 3 kept.
      float* mine = partial + (src * kWarps + warp) * kPartialPerWarp;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = lane_group + (e >= 2 ? 8 : 0), n = 2 * lane_quad + (e & 1);
        if (n < 3) mine[i * 3 + n] = acc[0][e];
        acc[0][e] = 0.0f;
      }
    }
    __syncthreads();  // the stage is rewritten S - 1 chunks on
  }
  gpu::async_wait<0>();  // only empty groups remain

  // Thread i: output 16 tile + i. The last loop barrier made every source's sums visible.
  if (tid < kTileRows) {
    const int i = tid;
    auto value = [&](int src) {
      const float* p = partial + src * kWarps * kPartialPerWarp + i * 3;
      return staged::parts_value([&](int part) {
        float v = p[part];
        for (int w = 1; w < kWarps; ++w) v += p[w * kPartialPerWarp + part];
        return v;
      });
    };
    // moe_combine_gpu's sum: products and sums rounded one by one, rank order, shared last.
    float sum = 0.0f;
    for (int rank = 0; rank < k; ++rank) sum = __fadd_rn(sum, __fmul_rn(rank_w[rank], value(rank)));
    if (a.down_shexp != nullptr) {
      const float gate = 1.0f / (1.0f + expf(-a.shared_gate_logit[r]));
      sum = __fadd_rn(sum, __fmul_rn(gate, value(k)));
    }
    const int64_t out = tile * kTileRows + i;
    if (out < a.n) {
      float* y = a.y + r * a.n + out;
      *y = a.accumulate ? *y + sum : sum;
    }
  }
}
#endif

template <int B>
__global__ void __launch_bounds__(kThreads) moe_down_combine_kernel(const MoeDownCombineArgs a, int64_t row_offset, bool prefetch) {
#if defined(DS_MMA_BF16)
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t ids[kMaxUsed];
  __shared__ float rank_w[kMaxUsed];
  const int64_t r = row_offset + blockIdx.y;
  if (prefetch && a.down_shexp != nullptr) {
    // The tile's shared-expert rows (gpu::prefetch_l2: the one access allowed before the wait).
    const int lines = static_cast<int>((a.sh_row_bytes + 127) / 128) + 1;  // +1: a row need not start on a line
    for (int i = static_cast<int>(threadIdx.x); i < kTileRows * lines; i += kThreads) {
      const int64_t out = min(static_cast<int64_t>(blockIdx.x) * kTileRows + i / lines, a.n - 1);
      const uint8_t* row = a.down_shexp + static_cast<size_t>(out) * a.sh_row_bytes;
      const uint8_t* at = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{127}) + 128 * (i % lines);
      if (at < row + a.sh_row_bytes) gpu::prefetch_l2(at);
    }
  }
  gpu::begin_kernel();
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < a.num_used) {
    ids[tid] = a.expert_ids[r * a.num_used + tid];
    rank_w[tid] = a.expert_weights[r * a.num_used + tid];
  }
  down_combine_block<B, stages_for<B>()>(a, r, smem, ids, rank_w);
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
  (void)a, (void)row_offset, (void)prefetch;  // never launched: moe_down_combine_supported is false
#endif
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The largest dynamic shared memory a block may opt into on the current device (0 on error).
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

// Static shared memory of the kernel beside the dynamic part (ids, weights, norm scratch, flag).
constexpr size_t kStaticSharedBytes = 2 * kMaxUsed * 4 + detail::kNormMaxThreads / 32 * 4 + 16;

template <int B>
gpuError_t launch(const MoeDownCombineArgs& a, gpuStream_t stream) {
  static std::atomic<uint64_t> smem_allowed{0};
  const size_t optin = max_shared_optin();
  const gpuError_t allowed = staged::allow_dynamic_smem(moe_down_combine_kernel<B>, optin - kStaticSharedBytes, smem_allowed);
  if (allowed != gpuSuccess) return allowed;
  const size_t bytes = layout_of<B>(a).bytes;
  const unsigned tiles = static_cast<unsigned>((a.n + kTileRows - 1) / kTileRows);
  for (int64_t first = 0; first < a.num_rows; first += kMaxGridY) {
    const dim3 grid(tiles, static_cast<unsigned>(a.num_rows - first < kMaxGridY ? a.num_rows - first : kMaxGridY));
    gpu::launch(moe_down_combine_kernel<B>, grid, kThreads, bytes, stream, a, first, gpu::prefetch_enabled());
  }
  return gpuGetLastError();
}

}  // namespace

bool moe_down_combine_supported(const MoeDownCombineArgs& a) {
#if defined(DS_GPU_CUDA)
  if (a.num_used < 1 || a.num_used > kMaxUsed || a.n <= 0 || a.exp_in <= 0 || a.exp_in % Chunk<1>::kInputs != 0) return false;
  if (a.exp_row_bytes % 16 != 0 || a.exp_row_bytes < static_cast<size_t>(a.exp_in / 32 * 18) || a.expert_bytes % 16 != 0 ||
      a.expert_bytes < a.exp_row_bytes * static_cast<size_t>(a.n) || !aligned16(a.down_exps) || !aligned16(a.exp_g))
    return false;
  const int b = staged::chunk_blocks_per_warp(a.exp_in);
  if (a.down_shexp != nullptr) {
    // One K walk for both matrices, as the staged launch of the two segments requires.
    if (a.sh_in <= 0 || a.sh_in % Chunk<1>::kInputs != 0 || staged::chunk_blocks_per_warp(a.sh_in) != b) return false;
    if (a.sh_row_bytes % 16 != 0 || a.sh_row_bytes < static_cast<size_t>(a.sh_in / 32 * 18) || !aligned16(a.down_shexp) ||
        !aligned16(a.sh_g))
      return false;
  }
  const size_t bytes = b == 4 ? layout_of<4>(a).bytes : layout_of<1>(a).bytes;
  return bytes + kStaticSharedBytes <= max_shared_optin();
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
  return staged::chunk_blocks_per_warp(a.exp_in) == 4 ? launch<4>(a, stream) : launch<1>(a, stream);
}

}  // namespace deltaserve::kernels
