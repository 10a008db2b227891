// Paged decode/verify attention (attention_gpu.h): a chunk kernel and a combine, either fused
// into the chunk kernel's last block per (row, KV head, split) or a separate kernel.
//
// Chunk kernel, block (chunk, kv head x head split, row), 256 threads, tiles of kTile = 64 keys.
// The block serves `group` = (query heads per KV head) / splits consecutive query heads of its
// KV head (the host picks the split: per head the same operations either way, so the same
// bits). Per tile, threads 0-63 put the keys' cache offsets in shared memory, then every
// thread issues all its K loads at once, and its V loads with them (one memory round trip per
// tile, 128 KB in flight per block at head_dim 256) or, kLateValues, after the scores, then:
//   scores  8 lanes per key (32 keys per pass, 2 passes); lane j holds float4s j, j + 8, ...
//           of the key; s = q.k * scale by an 8-lane butterfly per (key, query head)
//   softmax warp per query head of the block: running max m, P = exp(s - m), running sum l,
//           and the factor alpha = exp(m_old - m_new) that rescales the accumulators
//   P.V     thread (ks, col) = (t % KS, t / KS) owns float4 column col of head_dim for keys
//           ks, ks + KS, ...; the KS partial sums are added by a KS-lane butterfly at the end
// Workspace: acc [row][head][chunk][head_dim], then (m, l) [row][head][chunk][2].
//
// Combine, o = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M), chunks in order: M by fmaxf
// from -inf, factors expf(m_c - M), then l and o by fmaf chains, o / l * sigmoid(gate). Both
// forms run exactly these operations (combine_output is shared), so their bits agree.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kernels/attention/attention_gpu.h"
#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 256;
constexpr int kTile = static_cast<int>(kAttentionTileTokens);
constexpr int kMaxChunks = static_cast<int>(kAttentionMaxChunks);
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;
constexpr int kLanesPerKey = 8;

// attention_chunk_tiles on the device.
__device__ __forceinline__ int64_t chunk_tiles(int64_t num_keys) {
  const int64_t tiles = (num_keys + kTile - 1) / kTile;
  int64_t per_chunk = 1;
  while (per_chunk * kMaxChunks < tiles) per_chunk *= 2;
  return per_chunk;
}

// Chunks holding a row's keys: blocks [0, used) of the row's grid run, the rest exit at once.
// Capped by the grid (only a row past max_keys, a broken precondition, reaches the cap) so the
// arrival count still completes and the counter returns to zero.
__device__ __forceinline__ int chunks_used(int64_t num_keys, int64_t grid_chunks) {
  const int64_t per_chunk = chunk_tiles(num_keys) * kTile;
  return static_cast<int>(min((num_keys + per_chunk - 1) / per_chunk, grid_chunks));
}

// A partial written by another block of this launch: read from L2, past the SM's L1 (not
// coherent across SMs). CUDA: ld.global.cg (no ordering constraint between the loads, unlike
// volatile); HIP: a volatile load (glc).
__device__ __forceinline__ float load_coherent(const float* p) {
#if defined(DS_GPU_CUDA)
  return __ldcg(p);
#else
  return *static_cast<const volatile float*>(p);
#endif
}

// One output element of the combine: acc points at chunk 0's element, chunk c at c * hd; f and
// l hold the chunks' factors expf(m_c - M) and sums. kCoherent: the fused combine (partials of
// other blocks); the values, and so the arithmetic, are the same either way. Unrolled by 16: a
// one-stream step's 16 chunks (1,024 keys) in one batch of loads, one L2 round trip per output
// of the fused combine's last block instead of two.
template <bool kCoherent>
__device__ __forceinline__ float combine_output(const float* acc, int64_t hd, const float* f, const float* l_c, int used, float g) {
  float l = 0.0f, o = 0.0f;
#pragma unroll 16
  for (int c = 0; c < used; ++c) {
    const float x = kCoherent ? load_coherent(acc + c * hd) : acc[c * hd];
    l = fmaf(l_c[c], f[c], l);
    o = fmaf(x, f[c], o);
  }
  return o / l * gpu::sigmoidf_(g);
}

// The fused combine, run by the last chunk block of (row r, query heads head0 + [0, group)) after
// every chunk's partials are visible. f_s, l_s: [kGroup][kMaxChunks]; m_s: [kGroup]. Per head
// the separate combine kernel's operations, in its order.
template <int kGroup>
__device__ void combine_group(const PagedAttentionGpuArgs& a, int64_t grid_chunks, int64_t r, int64_t head0, int group,
                              int used, float* f_s, float* l_s, float* m_s) {
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t hd = a.head_dim;
  const int64_t entry0 = (r * a.num_heads + head0) * grid_chunks;  // (head head0, chunk 0)
  const float* ml = a.workspace + a.num_rows * a.num_heads * grid_chunks * hd + entry0 * 2;
  for (int i = tid; i < group * kMaxChunks; i += kThreads) {
    const int h = i / kMaxChunks, c = i % kMaxChunks;
    if (c < used) f_s[i] = load_coherent(ml + (h * grid_chunks + c) * 2), l_s[i] = load_coherent(ml + (h * grid_chunks + c) * 2 + 1);
  }
  __syncthreads();
  if (tid < group) {
    float m = -INFINITY;
    for (int c = 0; c < used; ++c) m = fmaxf(m, f_s[tid * kMaxChunks + c]);
    m_s[tid] = m;
  }
  __syncthreads();
  for (int i = tid; i < group * kMaxChunks; i += kThreads) {
    const int h = i / kMaxChunks, c = i % kMaxChunks;
    if (c < used) f_s[i] = expf(f_s[i] - m_s[h]);
  }
  __syncthreads();
  for (int64_t i = tid; i < group * hd; i += kThreads) {
    const int h = static_cast<int>(i / hd);
    const int64_t d = i % hd, head = head0 + h;
    const float* acc = a.workspace + (entry0 + h * grid_chunks) * hd + d;
    const float g = a.gate[r * a.q_stride + head * a.q_head_stride + d];
    a.out[r * a.out_stride + head * hd + d] = combine_output<true>(acc, hd, f_s + h * kMaxChunks, l_s + h * kMaxChunks, used, g);
  }
}

// Offset (floats) of position p's row of KV head kvh in the cache.
__device__ __forceinline__ int64_t cached_offset(const PagedAttentionGpuArgs& a, const int32_t* table, int p, int64_t kvh) {
  const int bt = static_cast<int>(a.block_tokens);
  const int64_t block = table[p / bt];
  return ((block * a.block_tokens + p % bt) * a.num_kv_heads + kvh) * a.head_dim;
}

// Asks L2 for the K and V rows of the block's first tile before the grid dependency wait
// (gpu::prefetch_l2, safe on any address): the positions, row sequences and block tables are
// the step's staged inputs, final before its first kernel (gpu_compat.h), and the rows of
// earlier tokens were written by earlier forwards; a row the kernel before this one writes
// fills with whatever it holds then, and the loads after the wait see its final value.
__device__ __forceinline__ void prefetch_first_tile(const PagedAttentionGpuArgs& a, int splits) {
  const int64_t chunk = blockIdx.x, kvh = blockIdx.y / splits, r = blockIdx.z;
  const int64_t num_keys = static_cast<int64_t>(a.positions[r]) + 1;
  const int64_t begin = chunk * chunk_tiles(num_keys) * kTile;
  const int n = static_cast<int>(min(static_cast<int64_t>(kTile), num_keys - begin));
  const int lines = static_cast<int>((a.head_dim * static_cast<int64_t>(sizeof(float)) + 127) / 128);
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.block_table_stride;
  for (int i = static_cast<int>(threadIdx.x); i < n * 2 * lines; i += kThreads) {
    const int key = i / (2 * lines), rest = i % (2 * lines);
    const float* row = (rest < lines ? a.k_cache : a.v_cache) + cached_offset(a, table, static_cast<int>(begin + key), kvh);
    gpu::prefetch_l2(row + 32 * (rest % lines));
  }
}

// kHd: head_dim rounded up to 64, 128 or 256; kGroup: the block's query heads rounded up to
// 1, 2, 4, 8 or 16 (register arrays are sized by these; the real values are masked at run
// time). Grid (chunks, num_kv_heads * splits, rows): blockIdx.y = kvh * splits + split.
// kLateValues: a tile's V loads go out after its scores instead of with its K loads, so K's
// and V's registers are never live together and two blocks fit an SM (one more round trip a
// tile, hidden by the other block when the grid is large); the same operations either way.
template <int kHd, int kGroup, bool kLateValues>
__global__ void __launch_bounds__(kThreads, kLateValues ? 2 : 1)
    attention_chunk_kernel(const PagedAttentionGpuArgs a, int64_t grid_chunks, int splits) {
  prefetch_first_tile(a, splits);
  gpu::begin_kernel();
  constexpr int kKVecs = kHd / (4 * kLanesPerKey);      // K float4s per lane per key
  constexpr int kKeysPerPass = kThreads / kLanesPerKey;  // 32
  constexpr int kPasses = kTile / kKeysPerPass;          // 2
  constexpr int kCols = kHd / 4;                         // float4 columns of a V row
  constexpr int kKS = kThreads / kCols;                  // key subsets in P.V: 16, 8, 4
  constexpr int kKeysPerSubset = kTile / kKS;
  static_assert(kKS <= kWarpSize && kPasses * kKeysPerPass == kTile && kKeysPerSubset * kKS == kTile);
  __shared__ float4 q_s[kGroup * kCols];  // [group][kHd / 4], zero past head_dim
  __shared__ float p_s[kGroup * kTile];   // scores, then probabilities
  __shared__ float m_s[kGroup], l_s[kGroup], alpha_s[kGroup];
  __shared__ int64_t key_row_s[kTile];  // the tile's keys' cache offsets (0 past the chunk's end)
  __shared__ int last_s;  // fused combine: this block is the (row, KV head, split)'s last to finish
  // The fused combine reuses p_s for the factors and q_s for the sums ([kGroup][kMaxChunks]).
  static_assert(kTile >= kMaxChunks && kHd >= kMaxChunks, "combine scratch must fit p_s and q_s");

  const int64_t chunk = blockIdx.x, kvh = blockIdx.y / splits, r = blockIdx.z;
  const int64_t num_keys = static_cast<int64_t>(a.positions[r]) + 1;
  const int64_t per_chunk = chunk_tiles(num_keys) * kTile;
  const int64_t begin = chunk * per_chunk;
  const int used = chunks_used(num_keys, grid_chunks);
  if (chunk >= used) return;  // begin >= num_keys: no keys, not counted by the fused combine
  const int64_t end = min(begin + per_chunk, num_keys);
  const int group = static_cast<int>(a.num_heads / a.num_kv_heads / splits);  // this block's heads
  const int64_t head0 = static_cast<int64_t>(blockIdx.y) * group;               // kvh * (group * splits) + split * group
  const int hd = static_cast<int>(a.head_dim);
  const int tid = static_cast<int>(threadIdx.x);
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.block_table_stride;

  // Key tid's cache offset in the tile at t0 (threads tid < kTile): one block-table lookup and
  // division per key, shared, instead of one per load (they were 40% of the instructions).
  const auto key_row = [&](int64_t t0) {
    return t0 + tid < end ? cached_offset(a, table, static_cast<int>(t0 + tid), kvh) : int64_t{0};
  };
  // q and the first tile's offsets: both loads in flight before either is stored.
  constexpr int kQPerThread = (kGroup * kCols + kThreads - 1) / kThreads;
  float4 qv[kQPerThread];
#pragma unroll
  for (int j = 0; j < kQPerThread; ++j) {
    const int i = tid + j * kThreads, h = i / kCols, c = i % kCols;
    qv[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < kGroup * kCols && h < group && 4 * c < hd) {
      qv[j] = *reinterpret_cast<const float4*>(a.q + r * a.q_stride + (head0 + h) * a.q_head_stride + 4 * c);
    }
  }
  if (tid < kTile) key_row_s[tid] = key_row(begin);
#pragma unroll
  for (int j = 0; j < kQPerThread; ++j) {
    if (tid + j * kThreads < kGroup * kCols) q_s[tid + j * kThreads] = qv[j];
  }
  if (tid < kGroup) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;

  const int lane8 = tid % kLanesPerKey, slot = tid / kLanesPerKey;
  const int ks = tid % kKS, col = tid / kKS;
  float4 acc[kGroup];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) acc[h] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  for (int64_t t0 = begin; t0 < end; t0 += kTile) {
    const int n = static_cast<int>(min(static_cast<int64_t>(kTile), end - t0));
    // Every thread read the previous tile's offsets before the scores' barrier.
    if (t0 != begin && tid < kTile) key_row_s[tid] = key_row(t0);
    __syncthreads();  // offsets, q_s and m_s/l_s written; p_s free (previous tile's P.V done)
    // All K and V loads of the tile first (independent of q and of each other).
    float4 kreg[kPasses][kKVecs];
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int i = ps * kKeysPerPass + slot;
      const float* k = a.k_cache + key_row_s[i];
#pragma unroll
      for (int v = 0; v < kKVecs; ++v) {
        const int e = 4 * (lane8 + kLanesPerKey * v);
        kreg[ps][v] = i < n && e < hd ? *reinterpret_cast<const float4*>(k + e) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    float4 vreg[kKeysPerSubset];
    const auto load_values = [&] {
#pragma unroll
      for (int u = 0; u < kKeysPerSubset; ++u) {
        const int i = ks + kKS * u;
        vreg[u] = i < n && 4 * col < hd ? *reinterpret_cast<const float4*>(a.v_cache + key_row_s[i] + 4 * col)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    };
    if constexpr (!kLateValues) load_values();

#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      if (h >= group) continue;  // uniform over the block (no break: clang unrolls only single-exit loops)
#pragma unroll
      for (int ps = 0; ps < kPasses; ++ps) {
        float dot = 0.0f;
#pragma unroll
        for (int v = 0; v < kKVecs; ++v) {
          const float4 q = q_s[h * kCols + lane8 + kLanesPerKey * v];
          dot = fmaf(q.x, kreg[ps][v].x, dot);
          dot = fmaf(q.y, kreg[ps][v].y, dot);
          dot = fmaf(q.z, kreg[ps][v].z, dot);
          dot = fmaf(q.w, kreg[ps][v].w, dot);
        }
        dot = gpu::group_sum<kLanesPerKey>(dot);
        const int i = ps * kKeysPerPass + slot;
        if (lane8 == 0) p_s[h * kTile + i] = i < n ? dot * a.scale : -INFINITY;
      }
    }
    if constexpr (kLateValues) load_values();  // in flight over the barrier and the softmax
    __syncthreads();

    const int lane = gpu::lane_id();
    for (int h = gpu::warp_id(); h < group; h += kThreads / kWarpSize) {
      float m = -INFINITY;
      for (int i = lane; i < kTile; i += kWarpSize) m = fmaxf(m, p_s[h * kTile + i]);
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, gpu::warp_max(m));  // finite: the tile has a key
      float l = 0.0f;
      for (int i = lane; i < kTile; i += kWarpSize) {
        const float e = i < n ? expf(p_s[h * kTile + i] - m_new) : 0.0f;
        p_s[h * kTile + i] = e;
        l += e;
      }
      l = gpu::warp_sum(l);
      // Every lane has read m_s[h] before lane 0 replaces it: the shuffles alone do not order
      // shared memory (racecheck reported the read/write pair as a hazard).
      gpu::sync_warp();
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);  // 0 on the first tile
        alpha_s[h] = alpha;
        l_s[h] = fmaf(l_s[h], alpha, l);
        m_s[h] = m_new;
      }
    }
    __syncthreads();

#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      if (h >= group) continue;
      const float alpha = alpha_s[h];
      float4 o = make_float4(acc[h].x * alpha, acc[h].y * alpha, acc[h].z * alpha, acc[h].w * alpha);
#pragma unroll
      for (int u = 0; u < kKeysPerSubset; ++u) {
        const float p = p_s[h * kTile + ks + kKS * u];
        o.x = fmaf(p, vreg[u].x, o.x);
        o.y = fmaf(p, vreg[u].y, o.y);
        o.z = fmaf(p, vreg[u].z, o.z);
        o.w = fmaf(p, vreg[u].w, o.w);
      }
      acc[h] = o;
    }
  }

  // Key subsets of a column are kKS consecutive lanes of one warp: add them by a butterfly.
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    acc[h].x = gpu::group_sum<kKS>(acc[h].x);
    acc[h].y = gpu::group_sum<kKS>(acc[h].y);
    acc[h].z = gpu::group_sum<kKS>(acc[h].z);
    acc[h].w = gpu::group_sum<kKS>(acc[h].w);
  }
  const int64_t entry0 = (r * a.num_heads + head0) * grid_chunks + chunk;  // head head0
  if (ks == 0 && 4 * col < hd) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      if (h >= group) continue;
      float* out = a.workspace + (entry0 + h * grid_chunks) * hd + 4 * col;
      out[0] = acc[h].x;
      out[1] = acc[h].y;
      out[2] = acc[h].z;
      out[3] = acc[h].w;
    }
  }
  if (tid < group) {  // m_s / l_s final since the last barrier
    float* ml = a.workspace + a.num_rows * a.num_heads * grid_chunks * hd + (entry0 + tid * grid_chunks) * 2;
    ml[0] = m_s[tid];
    ml[1] = l_s[tid];
  }
  if (a.sync_counters == nullptr) return;  // attention_combine_kernel follows

  // Last block done: every thread fences its own partial stores (release), then one arrival per
  // block; the block that completes the count combines and leaves the counter at zero.
  uint32_t* counter = a.sync_counters + r * gridDim.y + blockIdx.y;  // (row, KV head, split)
  gpu::fence_acq_rel_device();
  __syncthreads();  // also: every thread is done with q_s, p_s and m_s
  if (tid == 0) last_s = atomicAdd(counter, 1u) == static_cast<uint32_t>(used - 1);
  __syncthreads();
  if (last_s == 0) return;
  gpu::fence_acq_rel_device();  // acquire: the other blocks' partials were stored before their arrivals
  combine_group<kGroup>(a, grid_chunks, r, head0, group, used, p_s, reinterpret_cast<float*>(q_s), m_s);
  if (tid == 0) *counter = 0;  // every chunk block has arrived: ready for the next launch
}

// The separate combine (no sync counters). Block (head, row), kThreads threads, thread
// d < head_dim owns output element d.
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(const PagedAttentionGpuArgs a, int64_t grid_chunks) {
  gpu::begin_kernel();
  __shared__ float f_s[kMaxChunks], l_s[kMaxChunks];
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const int d = static_cast<int>(threadIdx.x);
  const int64_t hd = a.head_dim;
  const int64_t num_keys = static_cast<int64_t>(a.positions[r]) + 1;
  const int used = chunks_used(num_keys, grid_chunks);
  const int64_t entry0 = (r * a.num_heads + h) * grid_chunks;
  const float* ml = a.workspace + a.num_rows * a.num_heads * grid_chunks * hd + entry0 * 2;
  if (d < used) f_s[d] = ml[2 * d], l_s[d] = ml[2 * d + 1];
  __syncthreads();
  float m = -INFINITY;
  for (int c = 0; c < used; ++c) m = fmaxf(m, f_s[c]);
  __syncthreads();  // every thread has read the maxima before they become factors
  if (d < used) f_s[d] = expf(f_s[d] - m);
  __syncthreads();
  if (d >= hd) return;
  const float g = a.gate[r * a.q_stride + h * a.q_head_stride + d];
  a.out[r * a.out_stride + h * hd + d] = combine_output<false>(a.workspace + entry0 * hd + d, hd, f_s, l_s, used, g);
}

__global__ void kv_append_kernel(const KvAppendGpuArgs a) {
  gpu::begin_kernel();
  const int64_t r = blockIdx.x;
  const int64_t p = a.positions[r];
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.block_table_stride;
  const int64_t width = a.num_kv_heads * a.head_dim;
  const int64_t at = (static_cast<int64_t>(table[p / a.block_tokens]) * a.block_tokens + p % a.block_tokens) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    a.k_cache[at + i] = a.k[r * a.kv_stride + i];
    a.v_cache[at + i] = a.v[r * a.kv_stride + i];
  }
}

// Grid chunks: an upper bound of every row's chunk count (the count is not monotone in the
// number of keys, the tile count is).
int64_t chunks_of(const PagedAttentionGpuArgs& a) {
  const int64_t tiles = (a.max_keys + kTile - 1) / kTile;
  return tiles < kMaxChunks ? tiles : kMaxChunks;
}

template <int kHd, bool kLateValues>
void launch_chunks(const PagedAttentionGpuArgs& a, dim3 grid, int64_t heads, int splits, gpuStream_t stream) {
  const int64_t chunks = grid.x;
  if (heads <= 1) {
    gpu::launch(attention_chunk_kernel<kHd, 1, kLateValues>, grid, kThreads, 0, stream, a, chunks, splits);
  } else if (heads <= 2) {
    gpu::launch(attention_chunk_kernel<kHd, 2, kLateValues>, grid, kThreads, 0, stream, a, chunks, splits);
  } else if (heads <= 4) {
    gpu::launch(attention_chunk_kernel<kHd, 4, kLateValues>, grid, kThreads, 0, stream, a, chunks, splits);
  } else if (heads <= 8) {
    gpu::launch(attention_chunk_kernel<kHd, 8, kLateValues>, grid, kThreads, 0, stream, a, chunks, splits);
  } else {
    gpu::launch(attention_chunk_kernel<kHd, 16, kLateValues>, grid, kThreads, 0, stream, a, chunks, splits);
  }
}

template <int kHd>
void launch_chunks(const PagedAttentionGpuArgs& a, dim3 grid, int64_t heads, int splits, bool late_values, gpuStream_t stream) {
  if (late_values) {
    launch_chunks<kHd, true>(a, grid, heads, splits, stream);
  } else {
    launch_chunks<kHd, false>(a, grid, heads, splits, stream);
  }
}

}  // namespace

int64_t paged_attention_head_splits(const PagedAttentionGpuArgs& a) {
  if (a.head_splits != 0) return a.head_splits;
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return 1;
  const int64_t group = a.num_heads / a.num_kv_heads, blocks = chunks_of(a) * a.num_kv_heads * a.num_rows;
  int64_t best = 1;
  for (int64_t s = 1; s <= group; ++s) {
    if (group % s == 0 && blocks * s <= kAttentionSplitMaxBlocks) best = s;
  }
  return best;
}

int64_t paged_attention_workspace_floats(const PagedAttentionGpuArgs& a) {
  return a.num_rows * a.num_heads * chunks_of(a) * (a.head_dim + 2);
}

gpuError_t paged_attention_gpu(const PagedAttentionGpuArgs& a, gpuStream_t stream) {
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.num_heads / a.num_kv_heads > kMaxGroup ||
      a.head_dim <= 0 || a.head_dim % 4 != 0 || a.head_dim > kMaxHeadDim || a.block_tokens <= 0 || a.max_keys <= 0 ||
      a.num_rows < 0 || !gpu::aligned16(a.q) || !gpu::aligned16(a.k_cache) || !gpu::aligned16(a.v_cache) || a.q_stride % 4 != 0 ||
      a.q_head_stride % 4 != 0 || a.workspace == nullptr ||
      (reinterpret_cast<uintptr_t>(a.sync_counters) & 3u) != 0) {
    return gpuErrorInvalidValue;
  }
  if (a.num_rows == 0) return gpuSuccess;
  const int64_t num_chunks = chunks_of(a);
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t splits = paged_attention_head_splits(a);
  if (splits < 1 || group % splits != 0) return gpuErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(num_chunks), static_cast<unsigned>(a.num_kv_heads * splits),
                  static_cast<unsigned>(a.num_rows));
  const int64_t heads = group / splits;
  if (a.value_loads < 0 || a.value_loads > 2) return gpuErrorInvalidValue;
  const bool late = a.value_loads == 2 || (a.value_loads == 0 && a.num_rows * a.num_kv_heads >= kAttentionLateValueUnits);
  if (a.head_dim <= 64) {
    launch_chunks<64>(a, grid, heads, static_cast<int>(splits), late, stream);
  } else if (a.head_dim <= 128) {
    launch_chunks<128>(a, grid, heads, static_cast<int>(splits), late, stream);
  } else {
    launch_chunks<256>(a, grid, heads, static_cast<int>(splits), late, stream);
  }
  if (a.sync_counters == nullptr) {
    const dim3 combine_grid(static_cast<unsigned>(a.num_heads), static_cast<unsigned>(a.num_rows));
    gpu::launch(attention_combine_kernel, combine_grid, kThreads, 0, stream, a, num_chunks);
  }
  return gpuGetLastError();
}

gpuError_t kv_append_gpu(const KvAppendGpuArgs& a, gpuStream_t stream) {
  if (a.num_rows < 0 || a.block_tokens <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  gpu::launch(kv_append_kernel, static_cast<unsigned>(a.num_rows), 256, 0, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
