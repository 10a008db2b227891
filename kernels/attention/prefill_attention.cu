// Causal prefill attention over the paged cache (attention_gpu.h, prefill_attention_gpu): the
// CUDA-core form, and the dispatch to the tensor-core tile (prefill_attention_mma.cu) where it
// serves the call.
//
// Block (row tile, sequence, kv head), 256 threads: kRows consecutive rows of one sequence
// times the group's G query heads = 16 "virtual heads" v = row * G + h, which share every K
// and V load (the decode chunk kernel's scheme, attention.cu, with rows folded into the head
// group). Tiles of 64 keys from position 0 to the tile's last row, an online softmax per
// virtual head (a row masks keys past its own position), and the normalised, gated output
// written directly: no split, no workspace (prefill has rows enough to fill the device).
#include <cstdint>

#include "kernels/attention/attention_gpu.h"
#include "kernels/attention/prefill_attention_mma.h"
#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 256;
constexpr int kTile = 64;
constexpr int kVirtual = 16;  // virtual heads per block (rows x query heads of the group)
constexpr int kLanesPerKey = 8;

using detail::prefill_cached_offset;

template <int kHd>
__global__ void __launch_bounds__(kThreads, 1) prefill_attention_kernel(const PrefillAttentionGpuArgs a) {
  gpu::begin_kernel();
  constexpr int kKVecs = kHd / (4 * kLanesPerKey);
  constexpr int kKeysPerPass = kThreads / kLanesPerKey;
  constexpr int kPasses = kTile / kKeysPerPass;
  constexpr int kCols = kHd / 4;
  constexpr int kKS = kThreads / kCols;
  constexpr int kKeysPerSubset = kTile / kKS;
  static_assert(kKS <= kWarpSize && kPasses * kKeysPerPass == kTile && kKeysPerSubset * kKS == kTile);
  __shared__ float4 q_s[kVirtual * kCols];
  __shared__ float p_s[kVirtual * kTile];
  __shared__ float m_s[kVirtual], l_s[kVirtual], alpha_s[kVirtual];
  __shared__ int keys_s[kVirtual];  // keys of each virtual head's row (0: no row)

  const int group = static_cast<int>(a.num_heads / a.num_kv_heads);
  const int rows_per_block = kVirtual / group;
  const int64_t s = blockIdx.y, kvh = blockIdx.z;
  const int64_t seq_begin = a.seq_row_begin[s], seq_end = a.seq_row_begin[s + 1];
  const int64_t r0 = seq_begin + static_cast<int64_t>(blockIdx.x) * rows_per_block;
  if (r0 >= seq_end) return;
  const int num_rows = static_cast<int>(min(static_cast<int64_t>(rows_per_block), seq_end - r0));
  const int num_virtual = num_rows * group;
  const int64_t first_keys = static_cast<int64_t>(a.seq_first_position[s]) + (r0 - seq_begin) + 1;  // keys of row r0
  const int64_t end = first_keys + num_rows - 1;                                                     // keys of the last row
  const int hd = static_cast<int>(a.head_dim);
  const int tid = static_cast<int>(threadIdx.x);
  const int32_t* table = a.block_tables + s * a.block_table_stride;

  for (int i = tid; i < kVirtual * kCols; i += kThreads) {
    const int v = i / kCols, c = i % kCols;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (v < num_virtual && 4 * c < hd) {
      const int64_t r = r0 + v / group, h = kvh * group + v % group;
      x = *reinterpret_cast<const float4*>(a.q + r * a.q_stride + h * a.q_head_stride + 4 * c);
    }
    q_s[i] = x;
  }
  if (tid < kVirtual) {
    m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
    keys_s[tid] = tid < num_virtual ? static_cast<int>(first_keys + tid / group) : 0;
  }

  const int lane8 = tid % kLanesPerKey, slot = tid / kLanesPerKey;
  const int ks = tid % kKS, col = tid / kKS;
  float4 acc[kVirtual];
#pragma unroll
  for (int v = 0; v < kVirtual; ++v) acc[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  for (int64_t t0 = 0; t0 < end; t0 += kTile) {
    const int n = static_cast<int>(min(static_cast<int64_t>(kTile), end - t0));
    float4 kreg[kPasses][kKVecs];
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int i = ps * kKeysPerPass + slot;
      const float* k = i < n ? a.k_cache + prefill_cached_offset(a, table, static_cast<int>(t0) + i, kvh) : a.k_cache;
#pragma unroll
      for (int v = 0; v < kKVecs; ++v) {
        const int e = 4 * (lane8 + kLanesPerKey * v);
        kreg[ps][v] = i < n && e < hd ? *reinterpret_cast<const float4*>(k + e) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    float4 vreg[kKeysPerSubset];
#pragma unroll
    for (int u = 0; u < kKeysPerSubset; ++u) {
      const int i = ks + kKS * u;
      vreg[u] = i < n && 4 * col < hd
                    ? *reinterpret_cast<const float4*>(a.v_cache + prefill_cached_offset(a, table, static_cast<int>(t0) + i, kvh) + 4 * col)
                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncthreads();

#pragma unroll
    for (int v = 0; v < kVirtual; ++v) {
      if (v >= num_virtual) continue;  // uniform over the block
      const int keys = keys_s[v];
#pragma unroll
      for (int ps = 0; ps < kPasses; ++ps) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < kKVecs; ++j) {
          const float4 q = q_s[v * kCols + lane8 + kLanesPerKey * j];
          dot = fmaf(q.x, kreg[ps][j].x, dot);
          dot = fmaf(q.y, kreg[ps][j].y, dot);
          dot = fmaf(q.z, kreg[ps][j].z, dot);
          dot = fmaf(q.w, kreg[ps][j].w, dot);
        }
        dot = gpu::group_sum<kLanesPerKey>(dot);
        const int i = ps * kKeysPerPass + slot;
        if (lane8 == 0) p_s[v * kTile + i] = t0 + i < keys ? dot * a.scale : -INFINITY;  // causal mask
      }
    }
    __syncthreads();

    const int lane = gpu::lane_id();
    for (int v = gpu::warp_id(); v < num_virtual; v += kThreads / kWarpSize) {
      float m = -INFINITY;
      for (int i = lane; i < kTile; i += kWarpSize) m = fmaxf(m, p_s[v * kTile + i]);
      const float m_old = m_s[v];
      const float m_new = fmaxf(m_old, gpu::warp_max(m));  // finite: key 0 is in every row's first tile
      float l = 0.0f;
      for (int i = lane; i < kTile; i += kWarpSize) {
        const float e = expf(p_s[v * kTile + i] - m_new);  // masked keys: exp(-inf) = 0
        p_s[v * kTile + i] = e;
        l += e;
      }
      l = gpu::warp_sum(l);
      gpu::sync_warp();  // every lane has read m_s[v] before lane 0 replaces it (attention.cu says why)
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);
        alpha_s[v] = alpha;
        l_s[v] = fmaf(l_s[v], alpha, l);
        m_s[v] = m_new;
      }
    }
    __syncthreads();

#pragma unroll
    for (int v = 0; v < kVirtual; ++v) {
      if (v >= num_virtual) continue;
      const float alpha = alpha_s[v];
      float4 o = make_float4(acc[v].x * alpha, acc[v].y * alpha, acc[v].z * alpha, acc[v].w * alpha);
#pragma unroll
      for (int u = 0; u < kKeysPerSubset; ++u) {
        const float p = p_s[v * kTile + ks + kKS * u];
        o.x = fmaf(p, vreg[u].x, o.x);
        o.y = fmaf(p, vreg[u].y, o.y);
        o.z = fmaf(p, vreg[u].z, o.z);
        o.w = fmaf(p, vreg[u].w, o.w);
      }
      acc[v] = o;
    }
  }

#pragma unroll
  for (int v = 0; v < kVirtual; ++v) {
    acc[v].x = gpu::group_sum<kKS>(acc[v].x);
    acc[v].y = gpu::group_sum<kKS>(acc[v].y);
    acc[v].z = gpu::group_sum<kKS>(acc[v].z);
    acc[v].w = gpu::group_sum<kKS>(acc[v].w);
  }
  if (ks != 0 || 4 * col >= hd) return;
#pragma unroll
  for (int v = 0; v < kVirtual; ++v) {
    if (v >= num_virtual) continue;
    const int64_t r = r0 + v / group, h = kvh * group + v % group;
    const float inv_l = 1.0f / l_s[v];
    const float* g = a.gate + r * a.q_stride + h * a.q_head_stride + 4 * col;
    float* out = a.out + r * a.out_stride + h * hd + 4 * col;
    out[0] = acc[v].x * inv_l * gpu::sigmoidf_(g[0]);
    out[1] = acc[v].y * inv_l * gpu::sigmoidf_(g[1]);
    out[2] = acc[v].z * inv_l * gpu::sigmoidf_(g[2]);
    out[3] = acc[v].w * inv_l * gpu::sigmoidf_(g[3]);
  }
}

}  // namespace

bool prefill_attention_uses_tensor_cores(const PrefillAttentionGpuArgs& a) {
  return a.tensor_cores && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 && detail::prefill_attention_mma_usable(a);
}

gpuError_t prefill_attention_gpu(const PrefillAttentionGpuArgs& a, gpuStream_t stream) {
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.num_heads / a.num_kv_heads > kVirtual ||
      a.head_dim <= 0 || a.head_dim % 4 != 0 || a.head_dim > 256 || a.block_tokens <= 0 || a.num_seqs < 0 ||
      a.num_seqs > 65535 || a.max_rows_per_seq < 0 || !gpu::aligned16(a.q) || !gpu::aligned16(a.k_cache) ||
      !gpu::aligned16(a.v_cache) || a.q_stride % 4 != 0 || a.q_head_stride % 4 != 0) {
    return gpuErrorInvalidValue;
  }
  if (a.num_seqs == 0 || a.max_rows_per_seq == 0) return gpuSuccess;
  if (prefill_attention_uses_tensor_cores(a)) return detail::prefill_attention_mma_launch(a, stream);
  const int64_t rows_per_block = kVirtual / (a.num_heads / a.num_kv_heads);
  const dim3 grid(static_cast<unsigned>((a.max_rows_per_seq + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(a.num_kv_heads));
  if (a.head_dim <= 64) {
    gpu::launch(prefill_attention_kernel<64>, grid, kThreads, 0, stream, a);
  } else if (a.head_dim <= 128) {
    gpu::launch(prefill_attention_kernel<128>, grid, kThreads, 0, stream, a);
  } else {
    gpu::launch(prefill_attention_kernel<256>, grid, kThreads, 0, stream, a);
  }
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
