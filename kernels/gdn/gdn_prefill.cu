// Chunked GDN prefill (gdn_gpu.h, MODEL.md 3.1-3.2). Per sequence, chunks of up to C = 64 rows
// whose edges sit at multiples of 64 positions from the sequence start (first_position); per
// chunk and value head, with Gamma the in-chunk cumulative log decay, A_ij = beta_i e^(Gamma_i - Gamma_j) k_i.k_j (j < i), M = I + A:
//   U = M^-1 (beta V), W = M^-1 (beta e^Gamma K), P = (Q K^T) masked j <= i, times e^(Gamma_i - Gamma_j)
// then sequentially over chunks, with S the state entering the chunk:
//   D = U - W S;  O = (e^Gamma Q) S + P D;  S = e^Gamma_C S + (e^(Gamma_C - Gamma) K)^T D
// Launches:
//   table    one block: chunk index -> (sequence, first row, rows); unused entries -1
//   prep     (chunk, key head | value head): conv + SiLU; q, k L2-normalised (q times
//            dk^-1/2) one warp per row; v; g = ssm_a softplus(alpha + dt_bias), beta
//   intra    (chunk, value head), 256 threads: Gamma (one thread, in order); K K^T and Q K^T
//            in 4 x 4 register tiles; A to shared; P to the workspace; each thread solves
//            one column of [beta V | beta e^Gamma K] (64 values in registers, forward
//            substitution, A read as a broadcast); U overwrites V, W to the workspace
//   conv     (sequence): the new conv state = last 3 pre-conv rows (after prep read the old)
//   scan     (dv / 32 column tiles, value head, sequence), 256 threads: S [dk][32] in shared
//            memory across the sequence's chunks; thread (column c, group g) computes rows
//            g + 8m of D and O (W, Q, P rows read as float4 broadcasts), and owns state rows
//            g dk/8 .. + dk/8 for the update
// Every result is a fixed-order f32 chain; nothing depends on other sequences. A bf16 delta
// state (StateT = uint16_t) is widened when the scan loads it, rounded to bf16 at the end of
// every chunk (so a call boundary on a chunk edge changes no bit) and stored as is.
#include <cstdint>

#include "kernels/gdn/gdn_gpu.h"
#include "kernels/gdn/gdn_scan_mma.h"
#include "kernels/gdn/gdn_state_elem.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 64;
constexpr int kConvKernel = 4;
constexpr int kHistory = kConvKernel - 1;
constexpr int kTileCols = 32;    // state columns per scan block
constexpr int kGroups = kThreads / kTileCols;  // row groups per scan block
constexpr int kAStride = kChunk + 4;  // A and P rows in shared memory (float4-aligned)

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

using detail::from_state;  // delta-state elements: kernels/gdn/gdn_state_elem.h
using detail::to_state;

// Workspace carve-up, all float offsets multiples of 4 up to gam (float4-read buffers first).
struct Work {
  float* qn;    // [rows][Hk][dk]  normalised q (with dk^-1/2)
  float* kn;    // [rows][Hk][dk]  normalised k
  float* vu;    // [rows][Hv][dv]  SiLU(conv v), then U
  float* w;     // [rows][Hv][dk]  W
  float* p;     // [rows][Hv][64]  masked, decayed Q K^T (row i of its chunk)
  float* gam;   // [rows][Hv]      g, then in-chunk cumulative Gamma
  float* beta;  // [rows][Hv]
  int32_t* table;  // [max_chunks][3]: sequence (-1: unused), first row, rows
  int64_t max_chunks;
};

// A sequence of r rows starting o = first_position mod C into a chunk spans
// ceil((o + r) / C) <= r / C + 2 chunks, so the sequences of a call at most R / C + 2 S.
int64_t max_chunks_of(const GdnPrefillArgs& a) { return (a.num_rows + kChunk - 1) / kChunk + 2 * a.num_seqs; }

Work carve(const GdnPrefillArgs& a) {
  const int64_t r = a.num_rows, hk = a.num_k_heads, hv = a.num_v_heads, dk = a.head_dim_k, dv = a.head_dim_v;
  Work w{};
  float* p = a.workspace;
  w.qn = p, p += r * hk * dk;
  w.kn = p, p += r * hk * dk;
  w.vu = p, p += r * hv * dv;
  w.w = p, p += r * hv * dk;
  w.p = p, p += r * hv * kChunk;
  w.gam = p, p += r * hv;
  w.beta = p, p += r * hv;
  w.table = reinterpret_cast<int32_t*>(p);
  w.max_chunks = max_chunks_of(a);
  return w;
}

// Rows of the chunk that starts at sequence-local row t (before clipping to the sequence's
// rows): chunk edges sit at multiples of kChunk positions from the sequence start.
__device__ __forceinline__ int64_t chunk_len(const GdnPrefillArgs& a, int64_t s, int64_t t) {
  const int64_t first = a.first_position != nullptr ? a.first_position[s] : 0;
  return kChunk - (first + t) % kChunk;
}

__global__ void __launch_bounds__(kThreads) gdn_table_kernel(const GdnPrefillArgs a, const Work ws) {
  gpu::begin_kernel();
  __shared__ int64_t count_s;
  if (threadIdx.x == 0) {
    int64_t n = 0;
    for (int64_t s = 0; s < a.num_seqs; ++s) {
      const int64_t b0 = a.seq_row_begin[s], b1 = min(static_cast<int64_t>(a.seq_row_begin[s + 1]), a.num_rows);
      for (int64_t r = b0; r < b1 && n < ws.max_chunks; ++n) {
        const int64_t len = min(chunk_len(a, s, r - b0), b1 - r);
        ws.table[3 * n] = static_cast<int32_t>(s);
        ws.table[3 * n + 1] = static_cast<int32_t>(r);
        ws.table[3 * n + 2] = static_cast<int32_t>(len);
        r += len;
      }
    }
    count_s = n;
  }
  __syncthreads();
  for (int64_t i = count_s + threadIdx.x; i < ws.max_chunks; i += kThreads) ws.table[3 * i] = -1;
}

// Pre-conv input of channel ch at sequence-local index src (< 0: from the incoming conv state).
__device__ __forceinline__ float conv_input(const GdnPrefillArgs& a, const float* conv_in, int64_t seq_begin, int64_t src,
                                            int64_t ch, int64_t dc) {
  return src >= 0 ? a.qkv[(seq_begin + src) * a.qkv_stride + ch] : conv_in[(src + kHistory) * dc + ch];
}

// SiLU(causal conv) of channel ch at sequence-local index t, the same fused chain as gdn_step_gpu.
__device__ __forceinline__ float conv_silu(const GdnPrefillArgs& a, const float* conv_in, int64_t seq_begin, int64_t t,
                                           int64_t ch, int64_t dc) {
  float sum = 0.0f;
#pragma unroll
  for (int tap = 0; tap < kConvKernel; ++tap) {
    sum = fmaf(a.conv_w[ch * kConvKernel + tap], conv_input(a, conv_in, seq_begin, t - kHistory + tap, ch, dc), sum);
  }
  return gpu::siluf_(sum);
}

template <int DK>
__global__ void __launch_bounds__(kThreads) gdn_prep_kernel(const GdnPrefillArgs a, const Work ws) {
  gpu::begin_kernel();
  const int64_t chunk = blockIdx.x;
  const int64_t s = ws.table[3 * chunk];
  if (s < 0) return;
  const int64_t row0 = ws.table[3 * chunk + 1], n = ws.table[3 * chunk + 2];
  const int64_t hk = a.num_k_heads, hv = a.num_v_heads, dv = a.head_dim_v;
  const int64_t dk_all = hk * DK, dc = 2 * dk_all + hv * dv;
  const int64_t seq_begin = a.seq_row_begin[s];
  const float* conv_in = a.conv_states + static_cast<int64_t>(a.state_in[s]) * kHistory * dc;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t y = blockIdx.y;
  if (y < hk) {  // q and k of key head y: one warp per row, lanes over the head's channels
    constexpr int kPerLane = DK / gpu::kWarpSize;
    constexpr int kWarps = kThreads / gpu::kWarpSize;
    const float q_scale = 1.0f / sqrtf(static_cast<float>(DK));
    const int lane = gpu::lane_id();
    for (int64_t r = gpu::warp_id(); r < n; r += kWarps) {
      const int64_t row = row0 + r, t = row - seq_begin;
      float uq[kPerLane], uk[kPerLane];
      float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) {
        const int64_t e = lane + gpu::kWarpSize * m;
        uq[m] = conv_silu(a, conv_in, seq_begin, t, y * DK + e, dc);
        uk[m] = conv_silu(a, conv_in, seq_begin, t, dk_all + y * DK + e, dc);
        ssq = fmaf(uq[m], uq[m], ssq);
        ssk = fmaf(uk[m], uk[m], ssk);
      }
      const float inv_q = 1.0f / sqrtf(gpu::warp_sum(ssq) + a.l2_eps);
      const float inv_k = 1.0f / sqrtf(gpu::warp_sum(ssk) + a.l2_eps);
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) {
        const int64_t at = row * dk_all + y * DK + lane + gpu::kWarpSize * m;
        ws.qn[at] = __fmul_rn(uq[m], inv_q) * q_scale;
        ws.kn[at] = uk[m] * inv_k;
      }
    }
    return;
  }
  const int64_t j = y - hk;  // value head: v channels and the two gates
  for (int64_t idx = tid; idx < n * dv; idx += kThreads) {
    const int64_t r = idx / dv, e = idx % dv, row = row0 + r;
    ws.vu[row * hv * dv + j * dv + e] = conv_silu(a, conv_in, seq_begin, row - seq_begin, 2 * dk_all + j * dv + e, dc);
  }
  if (tid < n) {
    const int64_t row = row0 + tid;
    const float alpha = a.alpha[row * a.ab_stride + j] + a.dt_bias[j];
    ws.gam[row * hv + j] = a.ssm_a[j] * softplusf_(alpha);
    ws.beta[row * hv + j] = gpu::sigmoidf_(a.beta_logit[row * a.ab_stride + j]);
  }
}

template <int DK>
constexpr size_t intra_smem_bytes() {
  return sizeof(float) * (2 * kChunk * (DK + 1) + kChunk * kAStride + 2 * kChunk);
}

template <int DK>
__global__ void __launch_bounds__(kThreads) gdn_intra_kernel(const GdnPrefillArgs a, const Work ws) {
  gpu::begin_kernel();
  extern __shared__ float smem[];
  constexpr int kStride = DK + 1;  // K/Q rows: conflict-free column reads in the tiles
  float* k_s = smem;                     // [64][DK + 1]
  float* q_s = k_s + kChunk * kStride;   // [64][DK + 1]
  float* a_s = q_s + kChunk * kStride;   // [64][68]: A, strictly lower
  float* gam_s = a_s + kChunk * kAStride;
  float* beta_s = gam_s + kChunk;

  const int64_t chunk = blockIdx.x;
  const int64_t s = ws.table[3 * chunk];
  if (s < 0) return;
  const int64_t row0 = ws.table[3 * chunk + 1], n = ws.table[3 * chunk + 2];
  const int64_t hk = a.num_k_heads, hv = a.num_v_heads, dv = a.head_dim_v, j = blockIdx.y, kh = j % hk;
  const int tid = static_cast<int>(threadIdx.x);

  if (tid < kChunk) {  // padded rows: g = 0 (Gamma stays), beta = 0 (no write)
    gam_s[tid] = tid < n ? ws.gam[(row0 + tid) * hv + j] : 0.0f;
    beta_s[tid] = tid < n ? ws.beta[(row0 + tid) * hv + j] : 0.0f;
  }
  for (int64_t idx = tid; idx < kChunk * DK; idx += kThreads) {
    const int64_t r = idx / DK, e = idx % DK;
    const int64_t at = (row0 + r) * hk * DK + kh * DK + e;
    k_s[r * kStride + e] = r < n ? ws.kn[at] : 0.0f;
    q_s[r * kStride + e] = r < n ? ws.qn[at] : 0.0f;
  }
  __syncthreads();
  if (tid == 0) {
    float run = 0.0f;
    for (int r = 0; r < kChunk; ++r) run += gam_s[r], gam_s[r] = run;
  }
  // K K^T and Q K^T: thread (ti, tj) takes rows ti + 16a and columns tj + 16b.
  const int ti = tid / 16, tj = tid % 16;
  float kk[4][4] = {}, qk[4][4] = {};
  for (int e = 0; e < DK; ++e) {
    float kj[4], ki[4], qi[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) kj[b] = k_s[(tj + 16 * b) * kStride + e];
#pragma unroll
    for (int x = 0; x < 4; ++x) ki[x] = k_s[(ti + 16 * x) * kStride + e], qi[x] = q_s[(ti + 16 * x) * kStride + e];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
#pragma unroll
      for (int b = 0; b < 4; ++b) kk[x][b] = fmaf(ki[x], kj[b], kk[x][b]), qk[x][b] = fmaf(qi[x], kj[b], qk[x][b]);
    }
  }
  __syncthreads();  // Gamma is complete
  if (tid < n) ws.gam[(row0 + tid) * hv + j] = gam_s[tid];
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int i = ti + 16 * x;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int c = tj + 16 * b;
      // Exponents only where c <= i (<= 0 there): no overflow, no 0 * inf.
      const float decay = c <= i ? expf(gam_s[i] - gam_s[c]) : 0.0f;
      a_s[i * kAStride + c] = c < i ? beta_s[i] * decay * kk[x][b] : 0.0f;
      if (i < n) ws.p[((row0 + i) * hv + j) * kChunk + c] = qk[x][b] * decay;
    }
  }
  __syncthreads();

  // Forward substitution, one column of [beta V | beta e^Gamma K] per thread.
  for (int64_t c = tid; c < dv + DK; c += kThreads) {
    float x[kChunk];
    const bool is_v = c < dv;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      if (is_v) {
        x[r] = r < n ? beta_s[r] * ws.vu[(row0 + r) * hv * dv + j * dv + c] : 0.0f;
      } else {
        x[r] = beta_s[r] * expf(gam_s[r]) * k_s[r * kStride + (c - dv)];
      }
    }
#pragma unroll
    for (int i = 1; i < kChunk; ++i) {
      float acc = x[i];
#pragma unroll
      for (int c2 = 0; c2 < i; ++c2) acc = fmaf(-a_s[i * kAStride + c2], x[c2], acc);
      x[i] = acc;
    }
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      if (r >= n) continue;
      if (is_v) {
        ws.vu[(row0 + r) * hv * dv + j * dv + c] = x[r];
      } else {
        ws.w[((row0 + r) * hv + j) * DK + (c - dv)] = x[r];
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) gdn_conv_state_kernel(const GdnPrefillArgs a) {
  gpu::begin_kernel();
  const int64_t s = blockIdx.x;
  const int64_t out = a.state_out[s];
  if (out < 0) return;
  const int64_t dc = 2 * a.num_k_heads * a.head_dim_k + a.num_v_heads * a.head_dim_v;
  const int64_t b0 = a.seq_row_begin[s], t = a.seq_row_begin[s + 1] - b0;
  const float* conv_in = a.conv_states + static_cast<int64_t>(a.state_in[s]) * kHistory * dc;
  float* conv_out = a.conv_states + out * kHistory * dc;
  for (int64_t c = threadIdx.x; c < dc; c += kThreads) {
    float v[kHistory];  // window [old state | rows], the last kHistory of it; all read before any write
#pragma unroll
    for (int h = 0; h < kHistory; ++h) {
      const int64_t idx = t + h;
      v[h] = idx < kHistory ? conv_in[idx * dc + c] : a.qkv[(b0 + idx - kHistory) * a.qkv_stride + c];
    }
#pragma unroll
    for (int h = 0; h < kHistory; ++h) conv_out[h * dc + c] = v[h];
  }
}

template <int DK>
constexpr size_t scan_smem_bytes() {
  return sizeof(float) * (DK * kTileCols + 3 * kChunk * (DK + 4) + kChunk * kAStride + kChunk * kTileCols + kChunk);
}

template <int DK, class StateT, bool kTensor>
__global__ void __launch_bounds__(kThreads) gdn_scan_kernel(const GdnPrefillArgs a, const Work ws) {
  gpu::begin_kernel();
  extern __shared__ float4 smem4[];
  constexpr int kRowStride = DK + 4;
  constexpr int kRowsPerGroup = kChunk / kGroups;   // D / O rows per thread
  constexpr int kStatePerGroup = DK / kGroups;      // state rows per thread in the update
  static_assert(kStatePerGroup % 4 == 0);
  float* s_s = reinterpret_cast<float*>(smem4);    // [DK][32]
  float* w_s = s_s + DK * kTileCols;               // [64][DK + 4]
  float* q_s = w_s + kChunk * kRowStride;          // [64][DK + 4]: e^Gamma q
  float* k_s = q_s + kChunk * kRowStride;          // [64][DK + 4]: e^(Gamma_C - Gamma) k
  float* p_s = k_s + kChunk * kRowStride;          // [64][68]
  float* d_s = p_s + kChunk * kAStride;            // [64][32]: D
  float* gam_s = d_s + kChunk * kTileCols;         // [64]

  const int tid = static_cast<int>(threadIdx.x);
  const int c = tid % kTileCols, g = tid / kTileCols;
  const int64_t tile = blockIdx.x, j = blockIdx.y, s = blockIdx.z;
  const int64_t hk = a.num_k_heads, hv = a.num_v_heads, dv = a.head_dim_v, kh = j % hk;
  const int64_t col = j * dv + tile * kTileCols + c;  // this thread's output / U column
  const int64_t delta_entry = hv * DK * dv;
  const int64_t b0 = a.seq_row_begin[s], b1 = a.seq_row_begin[s + 1];
  const int64_t state_out = a.state_out[s];

  const StateT* src = static_cast<const StateT*>(a.delta_states) + static_cast<int64_t>(a.state_in[s]) * delta_entry + j * DK * dv + tile * kTileCols;
  for (int idx = tid; idx < DK * kTileCols; idx += kThreads) s_s[idx] = from_state(src[(idx / kTileCols) * dv + idx % kTileCols]);

  for (int64_t row0 = b0, n = 0; row0 < b1; row0 += n) {
    n = min(chunk_len(a, s, row0 - b0), b1 - row0);  // the table kernel's cut
    if (tid < kChunk) gam_s[tid] = ws.gam[(row0 + min(static_cast<int64_t>(tid), n - 1)) * hv + j];
    __syncthreads();  // also: the previous chunk's reads of every buffer are done
    const float gam_c = gam_s[kChunk - 1];  // padded rows repeat the last Gamma
    // Every global load of the chunk is issued before the first shared store (one round trip).
    constexpr int kLoads = kChunk * DK / 4 / kThreads, kPLoads = kChunk * kChunk / 4 / kThreads;
    static_assert(kLoads * kThreads * 4 == kChunk * DK && kPLoads * kThreads * 4 == kChunk * kChunk);
    float4 w4[kLoads], q4[kLoads], k4[kLoads], p4[kPLoads];
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int idx = tid + l * kThreads, r = idx / (DK / 4), e4 = idx % (DK / 4);
      w4[l] = r < n ? reinterpret_cast<const float4*>(ws.w + ((row0 + r) * hv + j) * DK)[e4] : zero4;
      q4[l] = r < n ? reinterpret_cast<const float4*>(ws.qn + (row0 + r) * hk * DK + kh * DK)[e4] : zero4;
      k4[l] = r < n ? reinterpret_cast<const float4*>(ws.kn + (row0 + r) * hk * DK + kh * DK)[e4] : zero4;
    }
#pragma unroll
    for (int l = 0; l < kPLoads; ++l) {
      const int idx = tid + l * kThreads, r = idx / (kChunk / 4), e4 = idx % (kChunk / 4);
      p4[l] = r < n ? reinterpret_cast<const float4*>(ws.p + ((row0 + r) * hv + j) * kChunk)[e4] : zero4;
    }
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int idx = tid + l * kThreads, r = idx / (DK / 4), e4 = idx % (DK / 4);
      // Padded rows are zero; their Gamma is the last row's, so both exponents stay <= 0.
      const float eq = expf(gam_s[r]), ek = expf(gam_c - gam_s[r]);
      reinterpret_cast<float4*>(w_s + r * kRowStride)[e4] = w4[l];
      reinterpret_cast<float4*>(q_s + r * kRowStride)[e4] = make_float4(q4[l].x * eq, q4[l].y * eq, q4[l].z * eq, q4[l].w * eq);
      reinterpret_cast<float4*>(k_s + r * kRowStride)[e4] = make_float4(k4[l].x * ek, k4[l].y * ek, k4[l].z * ek, k4[l].w * ek);
    }
#pragma unroll
    for (int l = 0; l < kPLoads; ++l) {
      const int idx = tid + l * kThreads, r = idx / (kChunk / 4), e4 = idx % (kChunk / 4);
      reinterpret_cast<float4*>(p_s + r * kAStride)[e4] = p4[l];
    }
    __syncthreads();

    if constexpr (kTensor) {  // the same three products on the tensor cores (gdn_scan_mma.h)
      float o[2][4];
      const int64_t col0 = j * dv + tile * kTileCols;
      detail::scan_mma_d_and_qs<DK>(w_s, q_s, kRowStride, s_s, d_s, ws.vu + row0 * hv * dv + col0, hv * dv, n, o);
      __syncthreads();  // D complete; every read of S for this chunk is done
      detail::scan_mma_out(p_s, kAStride, d_s, o, a.out + row0 * a.out_stride + col0, a.out_stride, n);
      detail::scan_mma_state<DK>(k_s, kRowStride, d_s, s_s, expf(gam_c), sizeof(StateT) == 2);
    } else {
      // D = U - W S for rows g + 8m.
      float acc[kRowsPerGroup];
#pragma unroll
      for (int m = 0; m < kRowsPerGroup; ++m) {
        const int64_t r = g + kGroups * m;
        acc[m] = r < n ? ws.vu[(row0 + r) * hv * dv + col] : 0.0f;
      }
      for (int i = 0; i < DK; i += 4) {
        const float s0 = s_s[i * kTileCols + c], s1 = s_s[(i + 1) * kTileCols + c];
        const float s2 = s_s[(i + 2) * kTileCols + c], s3 = s_s[(i + 3) * kTileCols + c];
#pragma unroll
        for (int m = 0; m < kRowsPerGroup; ++m) {
          const float4 w4 = *reinterpret_cast<const float4*>(w_s + (g + kGroups * m) * kRowStride + i);
          acc[m] = fmaf(-w4.x, s0, acc[m]);
          acc[m] = fmaf(-w4.y, s1, acc[m]);
          acc[m] = fmaf(-w4.z, s2, acc[m]);
          acc[m] = fmaf(-w4.w, s3, acc[m]);
        }
      }
#pragma unroll
      for (int m = 0; m < kRowsPerGroup; ++m) d_s[(g + kGroups * m) * kTileCols + c] = acc[m];
      __syncthreads();

      // O = (e^Gamma Q) S + P D.
#pragma unroll
      for (int m = 0; m < kRowsPerGroup; ++m) acc[m] = 0.0f;
      for (int i = 0; i < DK; i += 4) {
        const float s0 = s_s[i * kTileCols + c], s1 = s_s[(i + 1) * kTileCols + c];
        const float s2 = s_s[(i + 2) * kTileCols + c], s3 = s_s[(i + 3) * kTileCols + c];
#pragma unroll
        for (int m = 0; m < kRowsPerGroup; ++m) {
          const float4 q4 = *reinterpret_cast<const float4*>(q_s + (g + kGroups * m) * kRowStride + i);
          acc[m] = fmaf(q4.x, s0, acc[m]);
          acc[m] = fmaf(q4.y, s1, acc[m]);
          acc[m] = fmaf(q4.z, s2, acc[m]);
          acc[m] = fmaf(q4.w, s3, acc[m]);
        }
      }
      for (int i = 0; i < kChunk; i += 4) {
        const float d0 = d_s[i * kTileCols + c], d1 = d_s[(i + 1) * kTileCols + c];
        const float d2 = d_s[(i + 2) * kTileCols + c], d3 = d_s[(i + 3) * kTileCols + c];
#pragma unroll
        for (int m = 0; m < kRowsPerGroup; ++m) {
          const float4 p4 = *reinterpret_cast<const float4*>(p_s + (g + kGroups * m) * kAStride + i);
          acc[m] = fmaf(p4.x, d0, acc[m]);
          acc[m] = fmaf(p4.y, d1, acc[m]);
          acc[m] = fmaf(p4.z, d2, acc[m]);
          acc[m] = fmaf(p4.w, d3, acc[m]);
        }
      }
#pragma unroll
      for (int m = 0; m < kRowsPerGroup; ++m) {
        const int64_t r = g + kGroups * m;
        if (r < n) a.out[(row0 + r) * a.out_stride + col] = acc[m];
      }
      __syncthreads();  // every read of S for this chunk is done

      // S = e^Gamma_C S + (e^(Gamma_C - Gamma) K)^T D, state rows g * DK/8 ...
      const float decay_c = expf(gam_c);
      float st[kStatePerGroup];
#pragma unroll
      for (int m = 0; m < kStatePerGroup; ++m) st[m] = decay_c * s_s[(g * kStatePerGroup + m) * kTileCols + c];
      for (int r = 0; r < kChunk; ++r) {
        const float d = d_s[r * kTileCols + c];
#pragma unroll
        for (int m4 = 0; m4 < kStatePerGroup; m4 += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(k_s + r * kRowStride + g * kStatePerGroup + m4);
          st[m4] = fmaf(k4.x, d, st[m4]);
          st[m4 + 1] = fmaf(k4.y, d, st[m4 + 1]);
          st[m4 + 2] = fmaf(k4.z, d, st[m4 + 2]);
          st[m4 + 3] = fmaf(k4.w, d, st[m4 + 3]);
        }
      }
      if constexpr (sizeof(StateT) == 2) {  // the state as a call ending here would store it
#pragma unroll
        for (int m = 0; m < kStatePerGroup; ++m) st[m] = from_state(to_state<StateT>(st[m]));
      }
#pragma unroll
      for (int m = 0; m < kStatePerGroup; ++m) s_s[(g * kStatePerGroup + m) * kTileCols + c] = st[m];
    }
  }

  __syncthreads();
  if (state_out < 0) return;
  StateT* dst = static_cast<StateT*>(a.delta_states) + state_out * delta_entry + j * DK * dv + tile * kTileCols;
  for (int idx = tid; idx < DK * kTileCols; idx += kThreads) dst[(idx / kTileCols) * dv + idx % kTileCols] = to_state<StateT>(s_s[idx]);
}

template <class Kernel>
gpuError_t allow_smem(Kernel kernel, size_t bytes) {
#if defined(DS_GPU_CUDA)
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
#else
  (void)kernel;
  (void)bytes;
  return gpuSuccess;
#endif
}

template <int DK, class StateT>
gpuError_t launch(const GdnPrefillArgs& a, gpuStream_t stream) {
  // The chunk pass on the tensor cores where the device has bf16 mma (CUDA sm_80 and up).
  const bool tensor = a.tensor_cores && tensor_matvec_available();
  const auto scan = tensor ? gdn_scan_kernel<DK, StateT, true> : gdn_scan_kernel<DK, StateT, false>;
#if defined(DS_GPU_HIP)
  // Not yet on AMD: the blocks need more than the 64 KB of LDS of gfx906 / gfx90a (gdn_gpu.h).
  constexpr size_t kLdsBytes = size_t{64} << 10;
  if (scan_smem_bytes<DK>() > kLdsBytes || intra_smem_bytes<DK>() > kLdsBytes) return gpuErrorInvalidValue;
#endif
  const Work ws = carve(a);
  const unsigned chunks = static_cast<unsigned>(ws.max_chunks);
  const unsigned hk = static_cast<unsigned>(a.num_k_heads), hv = static_cast<unsigned>(a.num_v_heads);
  gpuError_t err = allow_smem(gdn_intra_kernel<DK>, intra_smem_bytes<DK>());
  if (err == gpuSuccess) err = allow_smem(scan, scan_smem_bytes<DK>());
  if (err != gpuSuccess) return err;
  gpu::launch(gdn_table_kernel, 1, kThreads, 0, stream, a, ws);
  gpu::launch(gdn_prep_kernel<DK>, dim3(chunks, hk + hv), kThreads, 0, stream, a, ws);
  gpu::launch(gdn_intra_kernel<DK>, dim3(chunks, hv), kThreads, intra_smem_bytes<DK>(), stream, a, ws);
  gpu::launch(gdn_conv_state_kernel, static_cast<unsigned>(a.num_seqs), kThreads, 0, stream, a);
  const dim3 scan_grid(static_cast<unsigned>(a.head_dim_v / kTileCols), hv, static_cast<unsigned>(a.num_seqs));
  gpu::launch(scan, scan_grid, kThreads, scan_smem_bytes<DK>(), stream, a, ws);
  return gpuGetLastError();
}

}  // namespace

int64_t gdn_prefill_workspace_floats(const GdnPrefillArgs& a) {
  const int64_t per_row = a.num_v_heads * (a.head_dim_v + a.head_dim_k + kChunk + 2) + 2 * a.num_k_heads * a.head_dim_k;
  return a.num_rows * per_row + 3 * max_chunks_of(a);
}

gpuError_t gdn_prefill_gpu(const GdnPrefillArgs& a, gpuStream_t stream) {
  if (a.conv_kernel != kConvKernel || a.head_dim_v <= 0 || a.head_dim_v % kTileCols != 0 || a.num_k_heads <= 0 ||
      a.num_v_heads <= 0 || a.num_v_heads % a.num_k_heads != 0 || a.num_v_heads > 65535 - a.num_k_heads ||
      a.num_seqs < 0 || a.num_seqs > 65535 || a.num_rows < 0 || a.workspace == nullptr ||
      (reinterpret_cast<uintptr_t>(a.workspace) & 15u) != 0 ||
      (a.delta_type != StateType::kF32 && a.delta_type != StateType::kBf16)) {
    return gpuErrorInvalidValue;
  }
  if (a.num_seqs == 0) return gpuSuccess;
  const bool bf16 = a.delta_type == StateType::kBf16;
  switch (a.head_dim_k) {
    case 64: return bf16 ? launch<64, uint16_t>(a, stream) : launch<64, float>(a, stream);
    case 128: return bf16 ? launch<128, uint16_t>(a, stream) : launch<128, float>(a, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace deltaserve::kernels
