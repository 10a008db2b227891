// Paged decode/verify attention (attention_gpu.h): a chunk kernel and a combine kernel.
//
// Chunk kernel, block (chunk, kv head, row), 256 threads, dynamic shared memory
// q[G][hd] + p[G][chunk]:
//   scores  warp w takes keys w, w + warps, ...; lanes split head_dim in float4s; one warp
//           butterfly per (key, query head) gives s = q.k * scale
//   softmax warp per query head: chunk max m, P = exp(s - m), l = sum P (fixed order)
//   P.V     thread t owns dim t % hd for heads t / hd, t / hd + 256 / hd, ...; keys in order
// Workspace entry per (row, head, chunk): [m, l, acc[hd]].
#include <cstdint>

#include "kernels/attention_gpu.h"
#include "kernels/gpu_compat.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 256;
constexpr int kChunk = static_cast<int>(kAttentionChunkTokens);
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ const float* cached_row(const float* cache, const PagedAttentionGpuArgs& a,
                                                   const int32_t* table, int64_t p, int64_t kvh) {
  const int64_t block = table[p / a.block_tokens];
  return cache + ((block * a.block_tokens + p % a.block_tokens) * a.num_kv_heads + kvh) * a.head_dim;
}

__global__ void __launch_bounds__(kThreads) attention_chunk_kernel(const PagedAttentionGpuArgs a, int64_t num_chunks) {
  extern __shared__ float smem[];
  const int64_t chunk = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z;
  const int64_t num_keys = static_cast<int64_t>(a.positions[r]) + 1;
  const int64_t begin = chunk * kChunk;
  if (begin >= num_keys) return;
  const int n = static_cast<int>(min(static_cast<int64_t>(kChunk), num_keys - begin));
  const int group = static_cast<int>(a.num_heads / a.num_kv_heads);
  const int hd = static_cast<int>(a.head_dim);
  float* q_s = smem;                 // [group][hd]
  float* p_s = smem + group * hd;    // [group][kChunk]
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.row_seq[r]) * a.block_table_stride;

  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    const int64_t h = kvh * group + i / hd;
    q_s[i] = a.q[r * a.q_stride + h * a.q_head_stride + i % hd];
  }
  __syncthreads();

  const int lane = gpu::lane_id(), warp = gpu::warp_id();
  const int num_warps = kThreads / kWarpSize;
  for (int i = warp; i < n; i += num_warps) {
    // The key's float4s this lane multiplies: elements 4 lane + 4 W j, loaded once for the group.
    constexpr int kVecs = kMaxHeadDim / (4 * kWarpSize);
    const float* k = cached_row(a.k_cache, a, table, begin + i, kvh);
    float4 kv[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int e = 4 * (lane + j * kWarpSize);
      kv[j] = e < hd ? *reinterpret_cast<const float4*>(k + e) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int h = 0; h < group; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const int e = 4 * (lane + j * kWarpSize);
        if (e >= hd) continue;
        const float* qh = q_s + h * hd + e;
        dot = fmaf(qh[0], kv[j].x, dot);
        dot = fmaf(qh[1], kv[j].y, dot);
        dot = fmaf(qh[2], kv[j].z, dot);
        dot = fmaf(qh[3], kv[j].w, dot);
      }
      dot = gpu::warp_sum(dot);
      if (lane == 0) p_s[h * kChunk + i] = dot * a.scale;
    }
  }
  __syncthreads();

  const int64_t entry = hd + 2;
  for (int h = warp; h < group; h += num_warps) {
    float m = -INFINITY;
    for (int i = lane; i < n; i += kWarpSize) m = fmaxf(m, p_s[h * kChunk + i]);
    m = gpu::warp_max(m);
    float l = 0.0f;
    for (int i = lane; i < n; i += kWarpSize) {
      const float e = expf(p_s[h * kChunk + i] - m);
      p_s[h * kChunk + i] = e;
      l += e;
    }
    l = gpu::warp_sum(l);
    if (lane == 0) {
      float* ws = a.workspace + ((r * a.num_heads + kvh * group + h) * num_chunks + chunk) * entry;
      ws[0] = m;
      ws[1] = l;
    }
  }
  __syncthreads();

  const int d = static_cast<int>(threadIdx.x) % hd;
  const int heads_step = kThreads / hd;  // hd <= kThreads
  const int h0 = static_cast<int>(threadIdx.x) / hd;
  if (h0 >= heads_step) return;  // threads past a whole number of head_dim rows
  float acc[kMaxGroup];
#pragma unroll
  for (int k = 0; k < kMaxGroup; ++k) acc[k] = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = cached_row(a.v_cache, a, table, begin + i, kvh)[d];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      const int h = h0 + k * heads_step;
      if (h < group) acc[k] = fmaf(p_s[h * kChunk + i], v, acc[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxGroup; ++k) {
    const int h = h0 + k * heads_step;
    if (h < group) {
      float* ws = a.workspace + ((r * a.num_heads + kvh * group + h) * num_chunks + chunk) * entry;
      ws[2 + d] = acc[k];
    }
  }
}

// Block (head, row), head_dim threads: o = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M).
__global__ void __launch_bounds__(kMaxHeadDim) attention_combine_kernel(const PagedAttentionGpuArgs a, int64_t num_chunks) {
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const int d = static_cast<int>(threadIdx.x);
  const int64_t hd = a.head_dim, entry = hd + 2;
  const int64_t used = (static_cast<int64_t>(a.positions[r]) + kChunk) / kChunk;  // chunks holding keys
  const float* ws = a.workspace + (r * a.num_heads + h) * num_chunks * entry;
  float m = -INFINITY;
  for (int64_t c = 0; c < used; ++c) m = fmaxf(m, ws[c * entry]);
  float l = 0.0f, o = 0.0f;
  for (int64_t c = 0; c < used; ++c) {
    const float f = expf(ws[c * entry] - m);
    l = fmaf(ws[c * entry + 1], f, l);
    o = fmaf(ws[c * entry + 2 + d], f, o);
  }
  const float g = a.gate[r * a.q_stride + h * a.q_head_stride + d];
  a.out[r * a.out_stride + h * hd + d] = o / l * gpu::sigmoidf_(g);
}

__global__ void kv_append_kernel(const KvAppendGpuArgs a) {
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int64_t chunks_of(const PagedAttentionGpuArgs& a) { return (a.max_keys + kChunk - 1) / kChunk; }

}  // namespace

int64_t paged_attention_workspace_floats(const PagedAttentionGpuArgs& a) {
  return a.num_rows * a.num_heads * chunks_of(a) * (a.head_dim + 2);
}

gpuError_t paged_attention_gpu(const PagedAttentionGpuArgs& a, gpuStream_t stream) {
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.num_heads / a.num_kv_heads > kMaxGroup ||
      a.head_dim <= 0 || a.head_dim % 4 != 0 || a.head_dim > kMaxHeadDim || a.block_tokens <= 0 || a.max_keys <= 0 ||
      a.num_rows < 0 || !aligned16(a.q) || !aligned16(a.k_cache) || !aligned16(a.v_cache) || a.q_stride % 4 != 0 ||
      a.q_head_stride % 4 != 0 || a.workspace == nullptr) {
    return gpuErrorInvalidValue;
  }
  if (a.num_rows == 0) return gpuSuccess;
  const int64_t num_chunks = chunks_of(a);
  const int64_t group = a.num_heads / a.num_kv_heads;
  const size_t smem = static_cast<size_t>(group * a.head_dim + group * kChunk) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(num_chunks), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(a.num_rows));
  attention_chunk_kernel<<<grid, kThreads, smem, stream>>>(a, num_chunks);
  const dim3 combine_grid(static_cast<unsigned>(a.num_heads), static_cast<unsigned>(a.num_rows));
  attention_combine_kernel<<<combine_grid, static_cast<unsigned>(a.head_dim), 0, stream>>>(a, num_chunks);
  return gpuGetLastError();
}

gpuError_t kv_append_gpu(const KvAppendGpuArgs& a, gpuStream_t stream) {
  if (a.num_rows < 0 || a.block_tokens <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  kv_append_kernel<<<static_cast<unsigned>(a.num_rows), 256, 0, stream>>>(a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
