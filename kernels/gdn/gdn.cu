// Fused GDN decode/verify step (gdn_gpu.h).
//
// Grid: (dv / 32 column tiles, Hv value heads, sequences). Block: 128 threads = 32 state
// columns x 4 parts; thread (col, part) keeps S[i][col] for i = 4 ii + part (ii < dk/4) in
// registers for all rows of its sequence. Per row:
//   conv + SiLU      q, k channels of key head j mod Hk (thread t owns channel t), and the
//                    block's 32 v channels (threads 0..31); each owner keeps its channel's
//                    last 3 pre-conv inputs in registers
//   L2 norms         two block reductions side by side (each in block_sum's order); q also
//                    times dk^-1/2
//   gates            beta = sigmoid(b), decay = exp(ssm_a * softplus(alpha + dt_bias))
//   delta rule       S *= decay; e = S^T k (4-lane butterfly); delta = beta (v - e);
//                    S += k delta^T; o = S^T q (butterfly); part 0 writes o
// Fused gated norm (norm_w set): after its rows each block stores its raw o columns and counts
// itself done for its value head; the last of the head's dv/32 blocks normalises the head's
// groups in place with norm_block.h's code (the same bits as gated_rms_norm_gpu, whose block
// for n = dv <= 128 has the same reduction order as this 128-thread block).
// Bytes per (sequence, layer): the state read once and written once (2 MiB for 35B-A3B in f32,
// 1 MiB in bf16), the rows' qkv, plus one state's bytes per snapshot row.
// Where the state lives during the launch (GdnStateHome): in registers (32 a thread at dk = 128),
// loaded straight or staged through shared memory, or in shared memory for the whole launch
// (each row reads it twice and writes it once there): the registers then drop to ~half, twice
// the blocks share an SM, and a many-sequence step, latency-bound in waves of blocks, keeps
// twice the state bytes in flight. Every home runs the same f32 operations in the same order.
// State storage (StateT): float, or uint16_t holding bf16 bits; with bf16 every row starts by
// rounding the register state to bf16 (the previous row's o read it unrounded; rounding there
// instead spilled at dk = dv = 128), so R rows in one launch give the bits of R launches of one
// row. The f32 instantiation has no extra instruction (same PTX as before the option).
#include <cstdint>
#include <string>

#include "kernels/gpu/async_copy.h"
#include "kernels/gdn/gdn_gpu.h"
#include "kernels/gdn/gdn_state_elem.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/norm/norm_block.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kParts = 4;                       // lanes sharing one state column
constexpr int kCols = kThreads / kParts;        // state columns per block
constexpr int kConvKernel = 4;
constexpr int kHistory = kConvKernel - 1;

// sync_counters[s][kh] bit fields. Bits [0, kArrivalBits): blocks of the key head that have
// read its q/k conv state (the whole word without the fused norm). With the fused norm, bits
// kDoneShift + kDoneBits * g + [0, kDoneBits): finished column blocks of the key head's g-th
// value head (j = kh + g * Hk). Every field is counted up by plain adds and brought back to
// zero by the one block that sees it full, so the other fields never carry or borrow.
constexpr int kArrivalBits = 8;
constexpr int kDoneShift = kArrivalBits, kDoneBits = 3;
constexpr int kMaxHeadsPerKeyHead = static_cast<int>(kGdnStepMaxHeadsPerKeyHead);
static_assert(kDoneShift + kDoneBits * kMaxHeadsPerKeyHead <= 31, "done fields past the sign bit");
// The fused norm's block: one element per thread, and gated_rms_norm_gpu's block for the same
// dv is no wider, so both reduce in the same order (norm_block.h).
constexpr int kMaxNormDv = static_cast<int>(kGdnStepMaxNormDv);
static_assert(kMaxNormDv <= kThreads && detail::norm_threads_for(kMaxNormDv) <= static_cast<unsigned>(kThreads));
static_assert((kMaxNormDv / kCols) < (1 << kDoneBits), "done field too narrow");
static_assert(kMaxHeadsPerKeyHead * (kMaxNormDv / kCols) < (1 << kArrivalBits), "arrival field too narrow");

// gpu::block_sum of a and of b with one pair of barriers: each total in block_sum's order.
__device__ __forceinline__ void block_sum2(float& a, float& b, float* scratch) {
  a = gpu::warp_sum(a);
  b = gpu::warp_sum(b);
  const int num_warps = static_cast<int>((blockDim.x + gpu::kWarpSize - 1) / gpu::kWarpSize);
  if (gpu::lane_id() == 0) scratch[gpu::warp_id()] = a, scratch[gpu::kMaxWarpsPerBlock + gpu::warp_id()] = b;
  __syncthreads();
  float total_a = 0.0f, total_b = 0.0f;
  for (int w = 0; w < num_warps; ++w) total_a += scratch[w], total_b += scratch[gpu::kMaxWarpsPerBlock + w];
  __syncthreads();
  a = total_a;
  b = total_b;
}

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// A block's state slice (DK rows x kCols columns) staged in shared memory (kHome below):
// rows padded by 32 bytes, so the 4 parts of a warp's 8 columns read distinct banks (f32:
// 160-byte rows, bf16: 96-byte rows).
template <class StateT>
struct StateStage {
  static constexpr int kRowBytes = kCols * static_cast<int>(sizeof(StateT)) + 32;
  static constexpr int kUnitsPerRow = kCols * static_cast<int>(sizeof(StateT)) / 16;
};

// Starts copying a block's state slice into `stage`: entry_head points at value head j's rows of
// the entry, the slice is their columns tile * kCols..; every thread of the block takes part.
template <int DK, class StateT>
__device__ __forceinline__ void stage_state_async(unsigned char* stage, const StateT* entry_head, int64_t dv, int64_t tile) {
  using L = StateStage<StateT>;
  for (int u = static_cast<int>(threadIdx.x); u < DK * L::kUnitsPerRow; u += kThreads) {
    const int row = u / L::kUnitsPerRow, unit = u % L::kUnitsPerRow;
    const StateT* src = entry_head + row * dv + tile * kCols + unit * (16 / static_cast<int>(sizeof(StateT)));
    gpu::async_copy16(stage + row * L::kRowBytes + 16 * unit, src);
  }
  gpu::async_commit();
}

// Its 16-byte units back to the entry (kShared's final state): the reverse of stage_state_async.
template <int DK, class StateT>
__device__ __forceinline__ void store_staged_state(const unsigned char* stage, StateT* entry_head, int64_t dv, int64_t tile) {
  using L = StateStage<StateT>;
  for (int u = static_cast<int>(threadIdx.x); u < DK * L::kUnitsPerRow; u += kThreads) {
    const int row = u / L::kUnitsPerRow, unit = u % L::kUnitsPerRow;
    StateT* dst = entry_head + row * dv + tile * kCols + unit * (16 / static_cast<int>(sizeof(StateT)));
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(stage + row * L::kRowBytes + 16 * unit);
  }
}

using detail::from_state;  // delta-state elements: kernels/gdn/gdn_state_elem.h
using detail::to_state;

// Where a block keeps its state slice between rows (the template's kHome).
constexpr int kHomeRegisters = 0;  // loaded straight into registers
constexpr int kHomeStaged = 1;     // staged through shared memory by cp.async, then registers
constexpr int kHomeShared = 2;     // staged, and kept in shared memory for the whole launch

// Blocks per SM the fixed-dv variants are held to: 128 registers per thread (dk = dv = 128: no
// spills on sm_90, 8 bytes on sm_80; unbounded it took 244 registers, 2 blocks per SM, and at
// 64 sequences the kernel is latency-bound: 8192 blocks in waves). HIP: no bound (its second
// argument means waves per execution unit).
// kHomeShared holds no state in registers: 8 blocks an SM (64 registers; its shared memory,
// ~22 KB a block at dk = 128 in f32, allows 10).
#if defined(DS_GPU_HIP)
constexpr int kMinBlocksFixedDv = 1;
constexpr int kMinBlocksShared = 1;
#else
constexpr int kMinBlocksFixedDv = 4;
constexpr int kMinBlocksShared = 8;
#endif

// DV > 0: head_dim_v == DV, fixed at compile time (the state offsets become immediates, which
// is what brings the registers down); DV == 0: any multiple of kCols. Same arithmetic either way.
// StateT: the delta pools' element type (float, or uint16_t = bf16 bits).
// kHome (above): kHomeStaged brings the slice in as 16-byte cp.async units (8 per thread)
// instead of 32 scalar loads per thread straight into registers: faster for one sequence (the
// few blocks of a small grid wait on fewer, wider loads), slower for many (where many blocks
// already overlap their loads; bench/RESULTS.md).
// kHomeShared keeps the staged slice where it landed: a row's S *= decay is recomputed from the
// stored value in its second pass (the same product), and the state written back after a row
// (bf16: rounded) is what the register homes' next row starts from, so the bits are theirs.
// launch_step picks the home from the sequence count. Same values, same arithmetic.
template <int DK, int DV, class StateT, int kHome>
__global__ void __launch_bounds__(kThreads, kHome == kHomeShared ? kMinBlocksShared : DV > 0 ? kMinBlocksFixedDv : 1)
    gdn_step_kernel(const GdnStepArgs a) {
  static_assert(DK % kParts == 0 && DK <= kThreads && DV % kCols == 0);
  constexpr bool kStaged = kHome != kHomeRegisters, kShared = kHome == kHomeShared;
  constexpr int kRowsPerPart = DK / kParts;
  constexpr int kStageRowBytes = StateStage<StateT>::kRowBytes;
  __shared__ __align__(16) unsigned char stage[kStaged ? DK * kStageRowBytes : 16];
  // Staged homes: the slice's cp.async copies, the conv state's and the weights' loads go out
  // before the grid dependency wait, a prefetch into shared memory and registers (the entry
  // index comes from state_in, which the step's staging copy wrote before the step's first
  // kernel, so it is final here; both states are written only by this layer's step of an
  // earlier forward, never by the kernel before this one, the layer's input projection). The
  // register home loads them after the wait.
  constexpr bool copied_early = kStaged;
  const int tid = static_cast<int>(threadIdx.x);
  const int part = tid % kParts, col = tid / kParts;
  const int64_t tile = blockIdx.x, j = blockIdx.y, s = blockIdx.z;
  const int64_t hk = a.num_k_heads, hv = a.num_v_heads, dv = DV > 0 ? DV : a.head_dim_v;
  const int64_t kh = j % hk;
  const int64_t dk_all = hk * DK;
  const int64_t dc = 2 * dk_all + hv * dv;
  const int64_t c = tile * kCols + col;  // this thread's state column
  const int64_t delta_entry = hv * DK * dv;
  const int64_t conv_entry = kHistory * dc;
  const int64_t state_in = a.state_in[s];  // final before the step's first kernel (gpu_compat.h)
  const StateT* state_head = static_cast<const StateT*>(a.delta_states) + state_in * delta_entry + j * DK * dv;

  // Channels this thread convolves: q and k channel `tid` of key head kh, v channel `tid`.
  const bool has_qk = tid < DK, has_v = tid < kCols;
  const int64_t ch_q = kh * DK + tid, ch_k = dk_all + kh * DK + tid;
  const int64_t ch_v = 2 * dk_all + j * dv + tile * kCols + tid;
  float hist_q[kHistory] = {}, hist_k[kHistory] = {}, hist_v[kHistory] = {};
  float w_q[kConvKernel] = {}, w_k[kConvKernel] = {}, w_v[kConvKernel] = {};
  float dt_bias = 0.0f, ssm_a = 0.0f;  // thread 0's gate parameters
  float S[kRowsPerPart];                // the register homes' state column part
  // What no kernel of this forward writes: the state slice (staged homes), the conv state
  // (both written only by this layer's step of an earlier forward) and the weights. Before the
  // grid dependency wait with copied_early, else after it.
  auto load_inputs_of_earlier_forwards = [&] {
    if constexpr (kStaged) {
      stage_state_async<DK>(stage, state_head, dv, tile);
    } else {
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) S[ii] = from_state(state_head[(kParts * ii + part) * dv + c]);
    }
    const float* conv_in = a.conv_states + state_in * conv_entry;
#pragma unroll
    for (int h = 0; h < kHistory; ++h) {
      if (has_qk) hist_q[h] = conv_in[h * dc + ch_q], hist_k[h] = conv_in[h * dc + ch_k];
      if (has_v) hist_v[h] = conv_in[h * dc + ch_v];
    }
#pragma unroll
    for (int h = 0; h < kConvKernel; ++h) {
      if (has_qk) w_q[h] = a.conv_w[ch_q * kConvKernel + h], w_k[h] = a.conv_w[ch_k * kConvKernel + h];
      if (has_v) w_v[h] = a.conv_w[ch_v * kConvKernel + h];
    }
    if (tid == 0) dt_bias = a.dt_bias[j], ssm_a = a.ssm_a[j];
  };
  if (copied_early) load_inputs_of_earlier_forwards();
  gpu::begin_kernel();
  __shared__ float q_s[DK], k_s[DK], v_s[kCols];
  __shared__ float scratch[2 * gpu::kMaxWarpsPerBlock];
  __shared__ float gate_s[2];  // decay, beta
  __shared__ int last_reader_s, norm_last_s;
  // kShared: this thread's element of state row i (= kParts ii + part), column col.
  auto staged_elem = [&](int ii) -> StateT& {
    return reinterpret_cast<StateT*>(stage + (kParts * ii + static_cast<int>(threadIdx.x) % kParts) * kStageRowBytes)
        [static_cast<int>(threadIdx.x) / kParts];
  };

  const int64_t row_begin = a.seq_row_begin[s], row_end = a.seq_row_begin[s + 1];
  const int64_t state_out = a.state_out[s];
  const int64_t ring = a.ring_first != nullptr ? a.ring_first[s] : -1;
  // The first block of key head kh (value head kh, tile 0) writes the shared q/k channels'
  // conv snapshots; the final q/k conv state is written by the last block to have read it.
  const bool qk_owner = j < hk && tile == 0;
  const bool fused_norm = a.norm_w != nullptr;
  int32_t* const counter = a.sync_counters + s * hk + kh;

  constexpr bool kBf16 = sizeof(StateT) == 2;
  // Unless they went out before the wait: the state first, its loads in flight during the conv
  // loads.
  if (!copied_early) load_inputs_of_earlier_forwards();

  if constexpr (kStaged) {  // the slice: every thread's copies done, then visible to the block
    gpu::async_wait<0>();
    __syncthreads();
    if constexpr (!kShared) {
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) S[ii] = from_state(staged_elem(ii));
    }
  }

  const float q_scale = 1.0f / sqrtf(static_cast<float>(DK));
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* x = a.qkv + r * a.qkv_stride;
    // The gates' inputs, read with the row's channels (not after the norms' barriers: an L2
    // round trip on thread 0 that the whole block waited for).
    float alpha_in = 0.0f, beta_in = 0.0f;
    if (tid == 0) alpha_in = a.alpha[r * a.ab_stride + j], beta_in = a.beta_logit[r * a.ab_stride + j];
    // Conv + SiLU; the window is [hist (oldest first) | x].
    float uq = 0.0f, uk = 0.0f;
    if (has_qk) {
      const float xq = x[ch_q], xk = x[ch_k];
      float sq = 0.0f, sk = 0.0f;
#pragma unroll
      for (int h = 0; h < kHistory; ++h) sq = fmaf(w_q[h], hist_q[h], sq), sk = fmaf(w_k[h], hist_k[h], sk);
      sq = fmaf(w_q[kHistory], xq, sq);
      sk = fmaf(w_k[kHistory], xk, sk);
#pragma unroll
      for (int h = 0; h + 1 < kHistory; ++h) hist_q[h] = hist_q[h + 1], hist_k[h] = hist_k[h + 1];
      hist_q[kHistory - 1] = xq;
      hist_k[kHistory - 1] = xk;
      uq = gpu::siluf_(sq);
      uk = gpu::siluf_(sk);
    }
    if (has_v) {
      const float xv = x[ch_v];
      float sv = 0.0f;
#pragma unroll
      for (int h = 0; h < kHistory; ++h) sv = fmaf(w_v[h], hist_v[h], sv);
      sv = fmaf(w_v[kHistory], xv, sv);
#pragma unroll
      for (int h = 0; h + 1 < kHistory; ++h) hist_v[h] = hist_v[h + 1];
      hist_v[kHistory - 1] = xv;
      v_s[tid] = gpu::siluf_(sv);
    }
    // L2 norms over the key head (every thread takes part in both reductions).
    float sum_q = uq * uq, sum_k = uk * uk;
    block_sum2(sum_q, sum_k, scratch);
    const float inv_q = 1.0f / sqrtf(sum_q + a.l2_eps);
    const float inv_k = 1.0f / sqrtf(sum_k + a.l2_eps);
    if (has_qk) {
      q_s[tid] = __fmul_rn(uq, inv_q) * q_scale;
      k_s[tid] = uk * inv_k;
    }
    if (tid == 0) {
      gate_s[0] = expf(ssm_a * softplusf_(alpha_in + dt_bias));
      gate_s[1] = gpu::sigmoidf_(beta_in);
    }
    __syncthreads();

    const float decay = gate_s[0], beta = gate_s[1];
    const int64_t snap_entry = ring >= 0 ? ring + (r - row_begin) : -1;
    StateT* snap = snap_entry >= 0 ? static_cast<StateT*>(a.delta_states) + snap_entry * delta_entry + j * DK * dv + c : nullptr;
    float e = 0.0f, o = 0.0f;
    if constexpr (kShared) {
      // The state as stored after the previous row (bf16: already rounded), decayed in both
      // passes by the same product.
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) e = fmaf(from_state(staged_elem(ii)) * decay, k_s[kParts * ii + part], e);
      e = gpu::group_sum<kParts>(e);
      const float delta = beta * (v_s[col] - e);
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) {
        const float s_new = fmaf(k_s[kParts * ii + part], delta, from_state(staged_elem(ii)) * decay);
        o = fmaf(s_new, q_s[kParts * ii + part], o);
        staged_elem(ii) = to_state<StateT>(s_new);
        if (snap != nullptr) snap[(kParts * ii + part) * dv] = to_state<StateT>(s_new);
      }
    } else {
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) {
        // bf16: the previous row's state as stored (a no-op on the loaded state), so this row
        // starts from what a launch of its own would load.
        if constexpr (kBf16) S[ii] = from_state(to_state<StateT>(S[ii]));
        S[ii] *= decay;
        e = fmaf(S[ii], k_s[kParts * ii + part], e);
      }
      e = gpu::group_sum<kParts>(e);
      const float delta = beta * (v_s[col] - e);
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) {
        S[ii] = fmaf(k_s[kParts * ii + part], delta, S[ii]);
        o = fmaf(S[ii], q_s[kParts * ii + part], o);
      }
      if (snap != nullptr) {
#pragma unroll
        for (int ii = 0; ii < kRowsPerPart; ++ii) snap[(kParts * ii + part) * dv] = to_state<StateT>(S[ii]);
      }
    }
    o = gpu::group_sum<kParts>(o);
    if (part == 0) a.out[r * a.out_stride + j * dv + c] = o;

    if (ring >= 0) {  // snapshot after row r: the conv channels this block owns (the delta state above)
      const int64_t entry = snap_entry;
      float* conv_snap = a.conv_states + entry * conv_entry;
#pragma unroll
      for (int h = 0; h < kHistory; ++h) {
        if (has_v) conv_snap[h * dc + ch_v] = hist_v[h];
        if (has_qk && qk_owner) conv_snap[h * dc + ch_q] = hist_q[h], conv_snap[h * dc + ch_k] = hist_k[h];
      }
    }
    __syncthreads();  // q_s, k_s, v_s, gate_s are rewritten by the next row
  }

  // The block's own final state (its delta state slice and v conv channels; no other block
  // reads or writes them). owned_stores_first (the staged home, few sequences): stored before
  // the count, so their drain overlaps the atomic's round trip;
  // else after it (at 64 sequences, stores before the fences cost, below).
  auto store_owned_state = [&] {
    if (state_out < 0) return;
    StateT* const out_head = static_cast<StateT*>(a.delta_states) + state_out * delta_entry + j * DK * dv;
    if constexpr (kShared) {
      store_staged_state<DK>(stage, out_head, dv, tile);  // the last row's writes: before the barriers above
    } else {
#pragma unroll
      for (int ii = 0; ii < kRowsPerPart; ++ii) out_head[(kParts * ii + part) * dv + c] = to_state<StateT>(S[ii]);
    }
    float* conv_out = a.conv_states + state_out * conv_entry;
#pragma unroll
    for (int h = 0; h < kHistory; ++h) {
      if (has_v) conv_out[h * dc + ch_v] = hist_v[h];
    }
  };
  constexpr bool owned_stores_first = kHome == kHomeStaged;
  if (owned_stores_first) store_owned_state();
  // Count this block in once its rows are done, in one atomic: it has read the old q/k conv
  // state (arrival; the last of the key head's blocks to arrive writes the final q/k conv
  // state), and with the fused norm its o columns are stored (done; the last column block of
  // value head j normalises j's groups). Why here and not at the start: the atomic's round
  // trip and its fences then wait on nothing but this block's o stores. Counted at the start
  // (arrival) and after the state stores (done, every thread fencing), the two round trips and
  // the store drain took a third of the stalls of a 64-sequence step (Nsight Compute).
  if (fused_norm && part == 0) gpu::fence_acq_rel_device();  // release this thread's o stores
  __syncthreads();
  if (tid == 0) {
    gpu::fence_acq_rel_device();  // release: the block's reads of the old conv state, and its o stores
    const int blocks_per_key_head = static_cast<int>((hv / hk) * (dv / kCols));
    const int arrival_mask = fused_norm ? (1 << kArrivalBits) - 1 : 0x7fffffff;
    const int shift = kDoneShift + kDoneBits * static_cast<int>(j / hk);
    const int tiles = static_cast<int>(dv / kCols);
    const int old = atomicAdd(counter, fused_norm ? 1 + (1 << shift) : 1);
    const bool last_reader = (old & arrival_mask) + 1 == blocks_per_key_head;
    const bool norm_last = fused_norm && ((old >> shift) & ((1 << kDoneBits) - 1)) + 1 == tiles;
    const int reset = (last_reader ? blocks_per_key_head : 0) + (norm_last ? tiles << shift : 0);
    if (reset != 0) atomicSub(counter, reset);
    gpu::fence_acq_rel_device();  // acquire: the other blocks' reads and o stores came before their counts
    last_reader_s = last_reader;
    norm_last_s = norm_last;
  }
  __syncthreads();
  if (!owned_stores_first) store_owned_state();
  if (state_out >= 0 && last_reader_s != 0) {
    float* conv_out = a.conv_states + state_out * conv_entry;
#pragma unroll
    for (int h = 0; h < kHistory; ++h) {
      if (has_qk) conv_out[h * dc + ch_q] = hist_q[h], conv_out[h * dc + ch_k] = hist_k[h];
    }
  }
  // Fused gated norm: the last column block of value head j normalises j's groups in place.
  if (norm_last_s == 0) return;
  gpu::fence_acq_rel_device();  // acquire (every thread): the other column blocks' o stores came before their counts
  for (int64_t r = row_begin; r < row_end; ++r) {
    float* o = a.out + r * a.out_stride + j * dv;
    detail::block_gated_rms_norm(o, a.z + r * a.z_stride + j * dv, a.norm_w, o, dv, a.norm_eps, scratch);
  }
}

// Launches of at most this many sequences stage the state into registers (kHomeStaged): one
// sequence measured faster staged, 16 equal, 64 slower (bench/RESULTS.md); past it the state
// stays in shared memory (kHomeShared). GdnStepArgs::state_home forces one home (the parity
// tests). Values do not depend on it.
constexpr int64_t kStagedMaxSeqs = 8;

GdnStateHome home_for(const GdnStepArgs& a) {
  if (a.state_home != GdnStateHome::kAuto) return a.state_home;
  return a.num_seqs <= kStagedMaxSeqs ? GdnStateHome::kStaged : GdnStateHome::kShared;
}

template <class StateT, int kHome>
void launch_as(const GdnStepArgs& a, gpuStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.head_dim_v / kCols), static_cast<unsigned>(a.num_v_heads),
                  static_cast<unsigned>(a.num_seqs));
  const bool dv_is_dk = a.head_dim_v == a.head_dim_k;
  if (a.head_dim_k == 64) {
    if (dv_is_dk) gpu::launch(gdn_step_kernel<64, 64, StateT, kHome>, grid, kThreads, 0, stream, a);
    else gpu::launch(gdn_step_kernel<64, 0, StateT, kHome>, grid, kThreads, 0, stream, a);
  } else {
    if (dv_is_dk) gpu::launch(gdn_step_kernel<128, 128, StateT, kHome>, grid, kThreads, 0, stream, a);
    else gpu::launch(gdn_step_kernel<128, 0, StateT, kHome>, grid, kThreads, 0, stream, a);
  }
}

template <class StateT>
gpuError_t launch_step(const GdnStepArgs& a, gpuStream_t stream) {
  switch (home_for(a)) {
    case GdnStateHome::kRegisters: launch_as<StateT, kHomeRegisters>(a, stream); break;
    case GdnStateHome::kStaged: launch_as<StateT, kHomeStaged>(a, stream); break;
    default: launch_as<StateT, kHomeShared>(a, stream); break;
  }
  return gpuGetLastError();
}

}  // namespace

std::string gdn_step_state_home_setting() {
  return "staged into registers to " + std::to_string(kStagedMaxSeqs) + " sequences, then shared memory";
}

gpuError_t gdn_step_gpu(const GdnStepArgs& a, gpuStream_t stream) {
  if (a.conv_kernel != kConvKernel || a.head_dim_v <= 0 || a.head_dim_v % kCols != 0 || a.num_k_heads <= 0 ||
      a.num_v_heads <= 0 || a.num_v_heads % a.num_k_heads != 0 || a.num_seqs < 0 || a.sync_counters == nullptr) {
    return gpuErrorInvalidValue;
  }
  if (a.norm_w != nullptr && (a.z == nullptr || !gdn_step_fuses_norm(a.num_k_heads, a.num_v_heads, a.head_dim_v))) {
    return gpuErrorInvalidValue;
  }
  if (a.delta_type != StateType::kF32 && a.delta_type != StateType::kBf16) return gpuErrorInvalidValue;
  if (a.state_home != GdnStateHome::kAuto && a.state_home != GdnStateHome::kRegisters &&
      a.state_home != GdnStateHome::kStaged && a.state_home != GdnStateHome::kShared)
    return gpuErrorInvalidValue;
  if (a.num_seqs == 0) return gpuSuccess;
  if (a.head_dim_k != 64 && a.head_dim_k != 128) return gpuErrorInvalidValue;
  if (a.delta_type == StateType::kBf16) return launch_step<uint16_t>(a, stream);
  return launch_step<float>(a, stream);
}

}  // namespace deltaserve::kernels
