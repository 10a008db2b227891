// Causal prefill attention on the tensor cores: prefill_attention_gpu's default form where
// prefill_attention_mma_usable holds (attention_gpu.h has the contract; prefill_attention.cu
// keeps the CUDA-core form for HIP, older devices and other head dims).
//
// Flash attention with the query-head group folded into M. Block (row tile, sequence, KV
// head), 4 warps: kM = 64 "virtual rows" v = row * G + h (G = num_heads / num_kv_heads, 64 / G
// consecutive rows of one sequence), warp w owning v = 16 w .. 16 w + 15. The CUDA-core kernel
// shares each K/V load among 16 query vectors; this one among 64, and multiplies on the tensor
// cores. Per tile of kN keys (32 at head_dim 256, 64 at 128), walked from position 0:
//   S = Q K^T   [16][kN] a warp, m16n8k16 bf16 mma, f32 accumulation
//   online softmax in f32 per virtual row, causal mask per row (row at position p: keys 0..p)
//   O = alpha O + P V   [16][head_dim] a warp, P taken from S's accumulators in registers
// and at the end out = O / l * sigmoid(gate), written where the CUDA-core kernel writes.
//
// Accuracy: each f32 operand x is split into bf16 hi = bf16(x), lo = bf16(x - hi) (|x - hi -
// lo| <= 2^-17 |x|) and a product taken as lo*hi + hi*lo + hi*hi (the GDN chunk pass's scheme,
// gdn_scan_mma.h): products within ~2^-16 relative, every sum in f32, so the outputs agree with
// the f32 reference to NMSE ~1e-10 (gpu_kernel_tests holds both forms to the same bound).
// K and V arrive as f32 from the paged cache through cp.async into a staging area (the next
// tile's copies overlap this tile's products), then are split into bf16 hi / lo planes once per
// block: K as [key][d] pairs, V transposed as [d][key] pairs, the layouts the B fragments read.
// Q is split once at the start. Rows of the planes are padded by 4 words, so the fragment loads
// (8 rows x 4 words) hit 32 distinct banks.
//
// Batch invariance: a virtual row's arithmetic depends only on its own query, its position and
// its sequence's cache. Tiles start at 0 in steps of kN for every row; a tile past a row's
// position (the block's later rows reach further) adds exact zeros (alpha = exp(0) = 1, P = 0,
// keys past the block's last row staged as zeros, never read from the cache), and a warp
// skips the tiles past all of its rows' positions, which changes nothing for the same reason.
// The mma computes each output element from its own A row and B column; the row max and sum
// are per-thread partial results combined by a fixed butterfly. So a row's output is the same
// bits whichever rows share its launch (gpu_kernel_tests runs each sequence's last row alone).
#include "kernels/attention/prefill_attention_mma.h"

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/async_copy.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/mma_bf16.h"
#include "kernels/matmul/matmul_gpu.h"

namespace deltaserve::kernels::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;  // CUDA warps (never launched on HIP)
constexpr int kM = 16 * kWarps;        // virtual rows a block

// Shared memory of the head_dim kHd tile, in 4-byte words.
template <int kHd>
struct Tile {
  static constexpr int kN = kHd == 256 ? 32 : 64;  // keys a tile
  static constexpr int kRowWords = kHd / 2 + 4;    // a Q or K plane row: head_dim / 2 bf16 pairs + pad
  static constexpr int kVtWords = kN / 2 + 4;      // a V^T plane row (one element of head_dim): key pairs + pad
  static constexpr int kStageFloats = kHd + 4;     // a staged f32 K or V row + pad
  static constexpr int kQHi = 0;
  static constexpr int kQLo = kQHi + kM * kRowWords;
  static constexpr int kKHi = kQLo + kM * kRowWords;
  static constexpr int kKLo = kKHi + kN * kRowWords;
  static constexpr int kVHi = kKLo + kN * kRowWords;
  static constexpr int kVLo = kVHi + kHd * kVtWords;
  static constexpr int kStageK = kVLo + kHd * kVtWords;
  static constexpr int kStageV = kStageK + kN * kStageFloats;
  static constexpr int kKeyOffsets = kStageV + kN * kStageFloats;  // kN int64 cache offsets of the next tile
  static constexpr int kWords = kKeyOffsets + 2 * kN;
  static constexpr size_t kBytes = sizeof(uint32_t) * static_cast<size_t>(kWords);
  static_assert(kRowWords % 32 == 4 && (kVtWords % 32 == 4 || kVtWords % 32 == 20), "fragment loads must be conflict-free");
  static_assert(kStageK % 4 == 0 && kStageFloats % 4 == 0 && kKeyOffsets % 2 == 0, "16-byte staging rows");
};

#if defined(DS_MMA_BF16)
using gpu::mma::mma_bf16;

__device__ __forceinline__ void split2(float first, float second, uint32_t& hi, uint32_t& lo) {
  hi = gpu::mma::pack_bf16x2(first, second);
  lo = gpu::mma::pack_bf16x2(__fsub_rn(first, gpu::mma::low_bf16(hi)), __fsub_rn(second, gpu::mma::high_bf16(hi)));
}

// The cache offsets of tile t0's keys (-1: past the block's last key) into the offsets array;
// threads < kN, one key each.
template <int kHd>
__device__ __forceinline__ void tile_offsets(const PrefillAttentionGpuArgs& a, const int32_t* table, int64_t kvh, int64_t t0,
                                             int64_t end, int64_t* offsets) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < Tile<kHd>::kN) offsets[i] = t0 + i < end ? prefill_cached_offset(a, table, static_cast<int>(t0) + i, kvh) : -1;
}

// cp.async of a tile's K and V rows into the staging area (keys past the block's last: zeros).
template <int kHd>
__device__ __forceinline__ void stage_tile(const PrefillAttentionGpuArgs& a, const int64_t* offsets, float* stage_k, float* stage_v) {
  using T = Tile<kHd>;
  constexpr int kVecs = kHd / 4;
  for (int i = static_cast<int>(threadIdx.x); i < T::kN * kVecs; i += kThreads) {
    const int key = i / kVecs, c = i % kVecs;
    const int64_t off = offsets[key];
    float* dk = stage_k + key * T::kStageFloats + 4 * c;
    float* dv = stage_v + key * T::kStageFloats + 4 * c;
    if (off >= 0) {
      gpu::async_copy16(dk, a.k_cache + off + 4 * c);
      gpu::async_copy16(dv, a.v_cache + off + 4 * c);
    } else {
      *reinterpret_cast<float4*>(dk) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      *reinterpret_cast<float4*>(dv) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  gpu::async_commit();
}

// The staged f32 tile into the bf16 planes: K [key][d pair], V^T [d][key pair].
template <int kHd>
__device__ __forceinline__ void split_tile(uint32_t* smem) {
  using T = Tile<kHd>;
  constexpr int kVecs = kHd / 4;
  const float* stage_k = reinterpret_cast<const float*>(smem + T::kStageK);
  const float* stage_v = reinterpret_cast<const float*>(smem + T::kStageV);
  for (int i = static_cast<int>(threadIdx.x); i < T::kN * kVecs; i += kThreads) {
    const int key = i / kVecs, c = i % kVecs;
    const float4 x = *reinterpret_cast<const float4*>(stage_k + key * T::kStageFloats + 4 * c);
    uint2 hi, lo;
    split2(x.x, x.y, hi.x, lo.x);
    split2(x.z, x.w, hi.y, lo.y);
    *reinterpret_cast<uint2*>(smem + T::kKHi + key * T::kRowWords + 2 * c) = hi;
    *reinterpret_cast<uint2*>(smem + T::kKLo + key * T::kRowWords + 2 * c) = lo;
  }
  // Key pair kp (keys 2 kp, 2 kp + 1) and elements 4 c .. 4 c + 3: a warp's lanes take 16 or 32
  // consecutive pairs, so its stores to a V^T row hit distinct banks.
  constexpr int kPairs = T::kN / 2;
  for (int i = static_cast<int>(threadIdx.x); i < kPairs * kVecs; i += kThreads) {
    const int kp = i % kPairs, c = i / kPairs;
    const float4 x0 = *reinterpret_cast<const float4*>(stage_v + 2 * kp * T::kStageFloats + 4 * c);
    const float4 x1 = *reinterpret_cast<const float4*>(stage_v + (2 * kp + 1) * T::kStageFloats + 4 * c);
    const float first[4] = {x0.x, x0.y, x0.z, x0.w}, second[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t hi, lo;
      split2(first[j], second[j], hi, lo);
      smem[T::kVHi + (4 * c + j) * T::kVtWords + kp] = hi;
      smem[T::kVLo + (4 * c + j) * T::kVtWords + kp] = lo;
    }
  }
}

// The warp's S = Q K^T [16][kN] for the staged tile (C fragments, one per 8 keys).
template <int kHd>
__device__ __forceinline__ void scores(const uint32_t* smem, int m0, float (&s)[Tile<kHd>::kN / 8][4]) {
  using T = Tile<kHd>;
  constexpr int kNt = T::kN / 8;
  const int g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const uint32_t* qh = smem + T::kQHi + (m0 + g) * T::kRowWords + t;
  const uint32_t* ql = smem + T::kQLo + (m0 + g) * T::kRowWords + t;
  const uint32_t* kh = smem + T::kKHi + g * T::kRowWords + t;
  const uint32_t* kl = smem + T::kKLo + g * T::kRowWords + t;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
  }
#pragma unroll 4
  for (int kk = 0; kk < kHd / 16; ++kk) {
    const int w = 8 * kk, w8 = 8 * T::kRowWords + w;
    const uint32_t ahi[4] = {qh[w], qh[w8], qh[w + 4], qh[w8 + 4]};
    const uint32_t alo[4] = {ql[w], ql[w8], ql[w + 4], ql[w8 + 4]};
    uint32_t bhi[kNt][2], blo[kNt][2];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int row = 8 * nt * T::kRowWords + w;
      bhi[nt][0] = kh[row], bhi[nt][1] = kh[row + 4];
      blo[nt][0] = kl[row], blo[nt][1] = kl[row + 4];
    }
    // The small terms first; each pass over the independent accumulators hides the mma latency.
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) mma_bf16(s[nt], alo, bhi[nt][0], bhi[nt][1]);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) mma_bf16(s[nt], ahi, blo[nt][0], blo[nt][1]);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) mma_bf16(s[nt], ahi, bhi[nt][0], bhi[nt][1]);
  }
}

// The warp's O += P V for the staged tile: P [16][kN] from the score accumulators (the C
// fragments of keys 16 kk .. 16 kk + 15 are the A fragment of that k step).
template <int kHd>
__device__ __forceinline__ void accumulate_pv(const uint32_t* smem, const float (&p)[Tile<kHd>::kN / 8][4],
                                              float (&o)[kHd / 8][4]) {
  using T = Tile<kHd>;
  constexpr int kCols = 8;  // output column tiles per pass
  const int g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const uint32_t* vh = smem + T::kVHi + g * T::kVtWords + t;
  const uint32_t* vl = smem + T::kVLo + g * T::kVtWords + t;
#pragma unroll
  for (int kk = 0; kk < T::kN / 16; ++kk) {
    uint32_t ahi[4], alo[4];
    split2(p[2 * kk][0], p[2 * kk][1], ahi[0], alo[0]);
    split2(p[2 * kk][2], p[2 * kk][3], ahi[1], alo[1]);
    split2(p[2 * kk + 1][0], p[2 * kk + 1][1], ahi[2], alo[2]);
    split2(p[2 * kk + 1][2], p[2 * kk + 1][3], ahi[3], alo[3]);
#pragma unroll
    for (int n0 = 0; n0 < kHd / 8; n0 += kCols) {
      uint32_t bhi[kCols][2], blo[kCols][2];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int at = 8 * (n0 + j) * T::kVtWords + 8 * kk;
        bhi[j][0] = vh[at], bhi[j][1] = vh[at + 4];
        blo[j][0] = vl[at], blo[j][1] = vl[at + 4];
      }
#pragma unroll
      for (int j = 0; j < kCols; ++j) mma_bf16(o[n0 + j], alo, bhi[j][0], bhi[j][1]);
#pragma unroll
      for (int j = 0; j < kCols; ++j) mma_bf16(o[n0 + j], ahi, blo[j][0], blo[j][1]);
#pragma unroll
      for (int j = 0; j < kCols; ++j) mma_bf16(o[n0 + j], ahi, bhi[j][0], bhi[j][1]);
    }
  }
}
#endif

template <int kHd>
__global__ void __launch_bounds__(kThreads, 1) prefill_attention_mma_kernel(const PrefillAttentionGpuArgs a) {
  gpu::begin_kernel();
#if defined(DS_MMA_BF16)
  using T = Tile<kHd>;
  constexpr int kN = T::kN, kNt = kN / 8, kVecs = kHd / 4;
  extern __shared__ __align__(16) uint32_t smem[];
  float* stage_k = reinterpret_cast<float*>(smem + T::kStageK);
  float* stage_v = reinterpret_cast<float*>(smem + T::kStageV);
  int64_t* offsets = reinterpret_cast<int64_t*>(smem + T::kKeyOffsets);

  const int group = static_cast<int>(a.num_heads / a.num_kv_heads);
  const int rows_per_block = kM / group;
  const int64_t s = blockIdx.y, kvh = blockIdx.z;
  const int64_t seq_begin = a.seq_row_begin[s], seq_end = a.seq_row_begin[s + 1];
  // The last row tiles (the most keys) first, so the long blocks start in the first wave.
  const int64_t r0 = seq_begin + static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * rows_per_block;
  if (r0 >= seq_end) return;
  const int num_virtual = static_cast<int>(min(static_cast<int64_t>(rows_per_block), seq_end - r0)) * group;
  const int64_t first_keys = static_cast<int64_t>(a.seq_first_position[s]) + (r0 - seq_begin) + 1;  // keys of row r0
  const int64_t end = first_keys + num_virtual / group - 1;                                          // keys of the last row
  const int32_t* table = a.block_tables + s * a.block_table_stride;
  const int tid = static_cast<int>(threadIdx.x);

  tile_offsets<kHd>(a, table, kvh, 0, end, offsets);
  __syncthreads();
  stage_tile<kHd>(a, offsets, stage_k, stage_v);

  // Q of the virtual rows (rows past the block's: zeros), split once.
  for (int i = tid; i < kM * kVecs; i += kThreads) {
    const int v = i / kVecs, c = i % kVecs;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (v < num_virtual) {
      const int64_t r = r0 + v / group, h = kvh * group + v % group;
      x = *reinterpret_cast<const float4*>(a.q + r * a.q_stride + h * a.q_head_stride + 4 * c);
    }
    uint2 hi, lo;
    split2(x.x, x.y, hi.x, lo.x);
    split2(x.z, x.w, hi.y, lo.y);
    *reinterpret_cast<uint2*>(smem + T::kQHi + v * T::kRowWords + 2 * c) = hi;
    *reinterpret_cast<uint2*>(smem + T::kQLo + v * T::kRowWords + 2 * c) = lo;
  }

  // This thread's fragment rows va (C slots 0, 1) and vb = va + 8 (slots 2, 3); rows past the
  // block's take its last row's keys (their results are never stored).
  const int m0 = 16 * gpu::warp_id(), g = gpu::lane_id() / 4, t = gpu::lane_id() % 4;
  const int va = m0 + g, vb = va + 8, last_v = num_virtual - 1;
  const int64_t keys_a = first_keys + min(va, last_v) / group, keys_b = first_keys + min(vb, last_v) / group;
  const int64_t warp_keys = first_keys + min(m0 + 15, last_v) / group;  // the most keys any of the warp's rows has
  const bool warp_active = m0 < num_virtual;
  float o[kHd / 8][4];
#pragma unroll
  for (int n = 0; n < kHd / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  for (int64_t t0 = 0; t0 < end; t0 += kN) {
    gpu::async_wait<0>();
    __syncthreads();  // tile t0 staged by every thread; every warp is done with the planes of the tile before
    split_tile<kHd>(smem);
    if (t0 + kN < end) tile_offsets<kHd>(a, table, kvh, t0 + kN, end, offsets);
    __syncthreads();  // planes and next offsets written; the staging area is free
    if (t0 + kN < end) stage_tile<kHd>(a, offsets, stage_k, stage_v);
    if (!warp_active || t0 >= warp_keys) continue;  // warp-uniform: the tile adds nothing to these rows

    float p[kNt][4];
    scores<kHd>(smem, m0, p);
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = t0 + 8 * nt + 2 * t + (e & 1);
        const bool row_a = e < 2;
        const float x = key < (row_a ? keys_a : keys_b) ? p[nt][e] * a.scale : -INFINITY;  // causal mask
        p[nt][e] = x;
        if (row_a) {
          mx_a = fmaxf(mx_a, x);
        } else {
          mx_b = fmaxf(mx_b, x);
        }
      }
    }
    // Finite: key 0 is in every row's first tile, and a warp's first tile is tile 0.
    const float mn_a = fmaxf(m_a, gpu::group_max<4>(mx_a)), mn_b = fmaxf(m_b, gpu::group_max<4>(mx_b));
    const float alpha_a = expf(m_a - mn_a), alpha_b = expf(m_b - mn_b);  // first tile: exp(-inf) = 0
    m_a = mn_a, m_b = mn_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      p[nt][0] = expf(p[nt][0] - mn_a);  // masked keys: exp(-inf) = 0
      p[nt][1] = expf(p[nt][1] - mn_a);
      p[nt][2] = expf(p[nt][2] - mn_b);
      p[nt][3] = expf(p[nt][3] - mn_b);
      sum_a += p[nt][0] + p[nt][1];
      sum_b += p[nt][2] + p[nt][3];
    }
    l_a = fmaf(l_a, alpha_a, gpu::group_sum<4>(sum_a));
    l_b = fmaf(l_b, alpha_b, gpu::group_sum<4>(sum_b));
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n) {
      o[n][0] *= alpha_a, o[n][1] *= alpha_a;
      o[n][2] *= alpha_b, o[n][3] *= alpha_b;
    }
    accumulate_pv<kHd>(smem, p, o);
  }
  if (!warp_active) return;

  const int hd = kHd;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int v = half == 0 ? va : vb;
    if (v >= num_virtual) continue;
    const int64_t r = r0 + v / group, h = kvh * group + v % group;
    const float inv_l = 1.0f / (half == 0 ? l_a : l_b);
    const float* gate = a.gate + r * a.q_stride + h * a.q_head_stride;
    float* out = a.out + r * a.out_stride + h * hd;
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n) {
      const int col = 8 * n + 2 * t;
      out[col] = o[n][2 * half] * inv_l * gpu::sigmoidf_(gate[col]);
      out[col + 1] = o[n][2 * half + 1] * inv_l * gpu::sigmoidf_(gate[col + 1]);
    }
  }
#else
  (void)a;  // never launched: prefill_attention_mma_usable is false without bf16 mma
#endif
}

#if defined(DS_GPU_CUDA)
template <int kHd>
gpuError_t launch(const PrefillAttentionGpuArgs& a, gpuStream_t stream) {
  const auto kernel = prefill_attention_mma_kernel<kHd>;
  const gpuError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tile<kHd>::kBytes));
  if (err != gpuSuccess) return err;
  const int64_t rows_per_block = kM / (a.num_heads / a.num_kv_heads);
  const dim3 grid(static_cast<unsigned>((a.max_rows_per_seq + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(a.num_kv_heads));
  gpu::launch(kernel, grid, kThreads, Tile<kHd>::kBytes, stream, a);
  return gpuGetLastError();
}

int optin_shared_bytes() {
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return value;
}
#endif

}  // namespace

bool prefill_attention_mma_usable(const PrefillAttentionGpuArgs& a) {
#if defined(DS_GPU_CUDA)
  if ((a.head_dim != 128 && a.head_dim != 256) || a.num_heads / a.num_kv_heads > kM || !tensor_matvec_available()) return false;
  static const int optin = optin_shared_bytes();  // per process, like tensor_matvec_available
  const size_t bytes = a.head_dim == 256 ? Tile<256>::kBytes : Tile<128>::kBytes;
  return bytes <= static_cast<size_t>(optin);
#else
  (void)a;
  return false;
#endif
}

gpuError_t prefill_attention_mma_launch(const PrefillAttentionGpuArgs& a, gpuStream_t stream) {
#if defined(DS_GPU_CUDA)
  return a.head_dim == 256 ? launch<256>(a, stream) : launch<128>(a, stream);
#else
  (void)a;
  (void)stream;
  return gpuErrorInvalidValue;
#endif
}

}  // namespace deltaserve::kernels::detail
