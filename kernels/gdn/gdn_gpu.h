// Fused Gated DeltaNet decode/verify step on the GPU (MODEL.md 2.5 steps 2-7) for all
// sequences of a step in one launch: causal conv1d (width 4) + SiLU over q|k|v, L2 norm of q
// and k per key head (q then scaled by dk^-1/2), beta = sigmoid(b), g = ssm_a *
// softplus(alpha + dt_bias), and the gated delta rule. Each sequence's rows run in order with
// its recurrent state held on chip across them (GdnStateHome): the state is read once and written once
// per step, plus one snapshot per row when the sequence has ring entries (verify rows).
// Output o is per value head, before the gated norm (gated_rms_norm_gpu) and out projection,
// or, with norm_w set, after it (the norm fused into the epilogue; see GdnStepArgs::norm_w).
//
// Same math as causal_conv1d_silu_ref + l2_norm_ref + gated_delta_rule_ref chained as the CPU
// GDN layer chains them (value head j reads key head j mod num_k_heads, GGUF order; state
// [Hv][dk][dv] key index outer; conv state [3][Dc] oldest first), to f32 rounding.
//
// State entries: the caller's pools hold entries of one sequence's layer state; entry e of
// the delta pool is delta_states + e * Hv*dk*dv elements of delta_type, of the conv pool
// conv_states + e * 3*Dc floats. Sequence s reads entry state_in[s]; its state after its last row goes to entry
// state_out[s] (may equal state_in[s]: in place; -1: not written); with ring_first non-null
// and ring_first[s] >= 0, the state after its row t also goes to entry ring_first[s] + t
// (ring entries must differ from state_in[s]). A sequence with ring_first[s] < 0 touches
// no ring.
//
// Delta-state precision (delta_type): kF32, or kBf16 (half the bytes: at 64 streams the
// 35B-A3B's state traffic otherwise rivals its weights). Either way the arithmetic is f32: a
// bf16 state is widened exactly when read and rounded to nearest even when stored. With kBf16
// the kernel also rounds the state it holds in registers to bf16 after every row (after that
// row's o, which reads the unrounded state), so a verify step of several rows gives the same
// bits (outputs, snapshots, final state) as the same rows run one step at a time from the
// stored state. Conv states stay f32 (small).
//
// Batch invariance: a row's results depend only on its sequence's rows and state (a fixed
// per-row reduction order; no atomics in any arithmetic).
//
// Fused gated norm (norm_w non-null): out receives gated_rms_norm_gpu's result over the raw o,
// bit for bit (the same block-level code, kernels/norm/norm_block.h, in a block whose reduction
// order equals that of gated_rms_norm_gpu's launch for n = dv): per row r and value head j,
// out[r][j*dv + i] = o / rms(o) * norm_w[i] * SiLU(z[r * z_stride + j*dv + i]), eps norm_eps.
// The raw o is first stored in out; the last of a value head's dv/32 column blocks to finish
// (its sequence's rows) normalises that head's groups in place. One launch replaces the pair
// gdn_step_gpu + gated_rms_norm_gpu over the same rows; states and snapshots are unchanged.
//
// Workspace: sync_counters, num_seqs * num_k_heads int32 that must be zero before the first
// launch; each launch leaves them zero. (Blocks sharing a key head all read that head's
// q/k conv state; the last of them to have read it writes the new one, so in-place updates
// are safe without a second launch. With the fused norm the same counter also holds, in bit
// fields, the finished column blocks of each of the key head's value heads.)
//
// Preconditions (else gpuErrorInvalidValue, nothing launched): head_dim_k 64 or 128;
// head_dim_v a multiple of 32; conv_kernel == 4; qkv 4-byte aligned; state_home one of the
// enum's values. With norm_w set also: z non-null and gdn_step_fuses_norm (head_dim_v <= 128, num_v_heads / num_k_heads <= 7).
// Calling thread: any; enqueues on `stream`; no allocation.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

// Element type of the delta-state pools (see "Delta-state precision" above).
enum class StateType : int32_t { kF32, kBf16 };
inline constexpr int64_t state_type_bytes(StateType t) { return t == StateType::kBf16 ? 2 : 4; }

// Where a block keeps its slice of the delta state across its sequence's rows (timing only:
// every home gives the same bits). kAuto: staged into registers for launches of few sequences
// (their few blocks wait on fewer, wider loads), in shared memory for many (half the
// registers, twice the blocks an SM); the others force one (the parity tests).
enum class GdnStateHome : int32_t { kAuto, kRegisters, kStaged, kShared };

struct GdnStepArgs {
  const float* qkv;         // [num_rows][qkv_stride]: pre-conv projections, q | k | v (Dc)
  int64_t qkv_stride;
  const float* alpha;       // [num_rows][ab_stride]: pre-softplus a, one per value head
  const float* beta_logit;  // [num_rows][ab_stride]: pre-sigmoid b
  int64_t ab_stride;
  const float* conv_w;      // [Dc][4]: w[c][3] multiplies the current token
  const float* ssm_a;       // [Hv]: -exp(A_log), as GGUF stores it
  const float* dt_bias;     // [Hv]
  float* out;               // [num_rows][out_stride]: o, value head j at j * dv
  int64_t out_stride;
  const int32_t* seq_row_begin;  // [num_seqs + 1]: rows of sequence s are [b[s], b[s + 1])
  int64_t num_seqs;
  void* delta_states;       // entries of [Hv][dk][dv] delta_type
  float* conv_states;       // entries of [3][Dc] f32
  const int32_t* state_in;  // [num_seqs]
  const int32_t* state_out;  // [num_seqs], -1: not written
  const int32_t* ring_first;  // [num_seqs] or null; < 0: no snapshots for that sequence
  int32_t* sync_counters;   // [num_seqs][num_k_heads], zero between launches
  int64_t num_k_heads;
  int64_t num_v_heads;
  int64_t head_dim_k;
  int64_t head_dim_v;
  int64_t conv_kernel;      // 4
  float l2_eps;             // 1e-6
  // Fused gated RMSNorm; norm_w null: out holds the raw o (z, z_stride, norm_eps unused).
  const float* norm_w = nullptr;  // [dv], shared by the value heads
  const float* z = nullptr;       // [num_rows][z_stride]: gate, value head j at j * dv
  int64_t z_stride = 0;
  float norm_eps = 0.0f;          // rms_norm_eps, 1e-6
  StateType delta_type = StateType::kF32;
  GdnStateHome state_home = GdnStateHome::kAuto;
};

// Whether gdn_step_gpu accepts norm_w for these shapes (else the caller runs
// gated_rms_norm_gpu after it): head_dim_v <= 128, num_v_heads / num_k_heads <= 7.
inline constexpr int64_t kGdnStepMaxNormDv = 128;
inline constexpr int64_t kGdnStepMaxHeadsPerKeyHead = 7;
inline bool gdn_step_fuses_norm(int64_t num_k_heads, int64_t num_v_heads, int64_t head_dim_v) {
  return num_k_heads > 0 && head_dim_v <= kGdnStepMaxNormDv && num_v_heads / num_k_heads <= kGdnStepMaxHeadsPerKeyHead;
}

gpuError_t gdn_step_gpu(const GdnStepArgs& args, gpuStream_t stream);

// kAuto's choice as words, for the backend's settings line.
std::string gdn_step_state_home_setting();

// Chunked prefill form (MODEL.md 3): the same outputs and final states as gdn_step_gpu over
// the same rows (to f32 rounding of a different summation order), for long prefill chunks of
// several sequences per call. Each sequence is cut into chunks of up to 64 rows whose edges
// sit at multiples of 64 positions from the sequence's start (first_position), so a row's
// results depend only on its own sequence (batch-invariant, bitwise) and not on where the
// scheduler or a prefix-cache resume cut the prompt, beyond the one chunk a cut off a
// multiple of 64 falls in (docs/prefix-cache.md, "Exactness"); within a
// chunk the rank-1 updates are condensed by the UT/WY transform (a triangular solve of the
// decay-masked, beta-scaled K K^T in shared memory) and a sequential pass over the chunks
// carries the state (dk x 32 columns per block) in shared memory.
//
// Inputs, layouts, gates, head mapping (value head j reads key head j mod num_k_heads),
// state entries and their in-place rule are those of GdnStepArgs; no ring snapshots (verify
// rows use gdn_step_gpu). The state starts from entry state_in[s], so a sequence prefilled
// over several calls (state_out == state_in) matches one call to f32 rounding (chunk
// boundaries differ, so not bitwise; bitwise when every call but the last ends on a multiple
// of 64 positions). With delta_type kBf16 the state is rounded to bf16 after every chunk of 64
// rows (not after every row as in gdn_step_gpu), so that cut stays bitwise too.
//
// Launches (stream-ordered, no atomics, no host synchronisation): chunk table; conv + SiLU +
// L2 norms + gates into the workspace; per (chunk, value head) the solve giving U, W and the
// masked Q K^T; the new conv states; the sequential chunk pass (outputs, delta states).
//
// Workspace: gdn_prefill_workspace_floats(args) floats, 16-byte aligned, no initial contents
// (about 57 KB per row at 35B-A3B shapes: normalised q and k, U, W, Q K^T, gates).
// The chunk pass runs on the tensor cores by default (where the device has bf16 mma);
// GdnPrefillArgs::tensor_cores = false keeps it on the vector units.
//
// Preconditions (else gpuErrorInvalidValue, nothing launched): head_dim_k 64 or 128;
// head_dim_v a multiple of 32; conv_kernel == 4; num_rows == seq_row_begin[num_seqs] (host
// copy, sizes the grids and the workspace); num_seqs <= 65535. Shared memory: up to 143 KB
// per block (dk 128), so CUDA sm_80 / sm_90 only; on HIP not yet (returns
// gpuErrorInvalidValue). Calling thread: any; enqueues on `stream`; no allocation.
struct GdnPrefillArgs {
  const float* qkv;         // [num_rows][qkv_stride]: pre-conv projections, q | k | v (Dc)
  int64_t qkv_stride;
  const float* alpha;       // [num_rows][ab_stride]: pre-softplus a, one per value head
  const float* beta_logit;  // [num_rows][ab_stride]: pre-sigmoid b
  int64_t ab_stride;
  const float* conv_w;      // [Dc][4]: w[c][3] multiplies the current token
  const float* ssm_a;       // [Hv]: -exp(A_log), as GGUF stores it
  const float* dt_bias;     // [Hv]
  float* out;               // [num_rows][out_stride]: o, value head j at j * dv
  int64_t out_stride;
  const int32_t* seq_row_begin;  // [num_seqs + 1] (device): rows of sequence s are [b[s], b[s + 1])
  int64_t num_seqs;
  int64_t num_rows;         // == seq_row_begin[num_seqs]
  void* delta_states;       // entries of [Hv][dk][dv] delta_type
  float* conv_states;       // entries of [3][Dc] f32
  const int32_t* state_in;   // [num_seqs]
  const int32_t* state_out;  // [num_seqs], -1: not written
  float* workspace;         // gdn_prefill_workspace_floats(*this) floats
  int64_t num_k_heads;
  int64_t num_v_heads;
  int64_t head_dim_k;
  int64_t head_dim_v;
  int64_t conv_kernel;      // 4
  float l2_eps;             // 1e-6
  StateType delta_type = StateType::kF32;
  // The chunk pass's products (D = U - W S, O, the state update) on the tensor cores, where the
  // device has bf16 mma (CUDA sm_80 and up): each f32 operand split into two bf16 parts, three
  // mma per product, f32 sums (kernels/gdn/gdn_scan_mma.h; a relative ~1e-5 from the f32 FMA
  // form). false, or a device without bf16 mma: f32 FMA on the vector units. Either form is
  // batch-invariant and cut-aligned as above; they differ from each other in the low bits.
  // On by default: its parity checks (gpu_kernel_tests --only gdn_prefill, both forms) pass on
  // an H100 and its chunk pass is the faster one there (bench/RESULTS.md, decision log).
  bool tensor_cores = true;
  // [num_seqs] (device) or null (all 0): position of sequence s's first row in its sequence;
  // chunk edges sit at multiples of 64 positions from the sequence start.
  const int32_t* first_position = nullptr;
};

int64_t gdn_prefill_workspace_floats(const GdnPrefillArgs& args);
// Kernels one gdn_prefill_gpu call launches (launch counters and graph node counts).
inline constexpr int kGdnPrefillLaunches = 5;
gpuError_t gdn_prefill_gpu(const GdnPrefillArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
