// The Gated DeltaNet layer core on the CPU at the granularity one GPU launch runs it
// (gdn_step_gpu, gdn_prefill_gpu; gdn_gpu.h), the reference their parity tests
// (tests/gpu/gdn*_test.cu) hold them to. Per sequence (MODEL.md 2.5):
//   u = causal_conv1d_silu_ref(qkv)                  [t][Dc]: q | k | v
//   q, k <- l2_norm_ref per key head (eps 1e-6);  q *= dk^-1/2
//   g = ssm_a softplus(alpha + dt_bias)  (log decay, < 0);  beta = sigmoid(b)   [t][Hv]
//   o = gated_delta_rule_ref(q, k, v, g, beta)       [t][Hv dv], delta state updated
// A composition of the op's references (conv1d.h, gated_delta_rule.h, norm.h). Host only and
// serial (serial_for): the reference bits do not depend on the thread count.
// Calling thread: any; blocks until done.
#pragma once

#include <cstdint>
#include <vector>

namespace deltaserve::kernels {

// The kernels take only a 4-tap conv; a conv-state entry holds the 3 previous inputs.
inline constexpr int64_t kGdnConvKernel = 4;
inline constexpr int64_t kGdnConvHistory = kGdnConvKernel - 1;

// Hk key heads of dk, Hv value heads of dv (value head j reads key head j mod Hk).
struct GdnShape {
  int64_t hk, hv, dk, dv;
  int64_t dc() const { return 2 * hk * dk + hv * dv; }  // qkv channels: q | k | v
};

// One launch's inputs, every row of every sequence (rows as in seq_row_begin).
struct GdnRefInputs {
  GdnShape sh;
  const float* qkv;      // [rows][Dc]: pre-conv projections
  const float* alpha;    // [rows][Hv]: pre-softplus a
  const float* b;        // [rows][Hv]: pre-sigmoid beta
  const float* conv_w;   // [Dc][kGdnConvKernel]
  const float* ssm_a;    // [Hv], < 0
  const float* dt_bias;  // [Hv]
};

// How the delta state is held between rows. kBf16AfterEachRow is gdn_step_gpu on a bf16 pool:
// each row's o is read from its unrounded f32 state, which is then rounded to bf16 (nearest
// even, kernels/quant.h) before the next row. (gdn_prefill_gpu on bf16 rounds per 64-row
// chunk instead, which this reference does not model.)
enum class GdnRefDeltaState { kF32, kBf16AfterEachRow };

// Rows [r0, r0 + t) of one sequence from conv_state [3][Dc] and delta_state [Hv][dk][dv], both
// updated in place; o to out [t][Hv dv]. Optional: the states after each row, as ring
// snapshots hold them, conv_after_row [t][3][Dc] and delta_after_row [t][Hv][dk][dv].
void gdn_rows_ref(const GdnRefInputs& in, int64_t r0, int64_t t, float* conv_state, float* delta_state, float* out,
                  GdnRefDeltaState held = GdnRefDeltaState::kF32, float* conv_after_row = nullptr,
                  float* delta_after_row = nullptr);

// The pools and outputs after one launch.
struct GdnRefPools {
  std::vector<float> delta;  // entries of [Hv][dk][dv]
  std::vector<float> conv;   // entries of [3][Dc]
  std::vector<float> out;    // [rows][Hv dv]
};

// Every sequence of one launch, with the kernels' pool indexing: sequence s (rows
// [seq_row_begin[s], seq_row_begin[s + 1])) starts from entry state_in[s] of the initial pools,
// writes its final states to entry state_out[s] (< 0: not written) and, where ring_first[s] >= 0,
// its states after row i to entry ring_first[s] + i. Empty ring_first: no snapshots. Entries
// written by no sequence keep their initial values.
GdnRefPools gdn_ref(const GdnRefInputs& in, const std::vector<int32_t>& seq_row_begin, const std::vector<int32_t>& state_in,
                    const std::vector<int32_t>& state_out, const std::vector<int32_t>& ring_first,
                    const std::vector<float>& delta0, const std::vector<float>& conv0,
                    GdnRefDeltaState held = GdnRefDeltaState::kF32);

}  // namespace deltaserve::kernels
