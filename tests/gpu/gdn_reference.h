// The CPU Gated DeltaNet chain that the GDN kernel tests (gdn_test.cu, gdn_bf16_test.cu,
// gdn_prefill_test.cu) hold gdn_step_gpu and gdn_prefill_gpu to, per sequence (MODEL.md 2.5):
//   u = causal_conv1d_silu_ref(qkv)                  [t][Dc]: q | k | v
//   q, k <- l2_norm_ref per key head (eps 1e-6);  q *= dk^-1/2
//   g = ssm_a softplus(alpha + dt_bias)  (log decay, < 0);  beta = sigmoid(b)   [t][Hv]
//   o = gated_delta_rule_ref(q, k, v, g, beta)       [t][Hv dv], delta state updated
// Host only and serial (serial_for): the reference bits do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/gdn/conv1d.h"
#include "kernels/gdn/gated_delta_rule.h"
#include "kernels/norm/norm.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"

namespace deltaserve::kernels::gputest {

// The kernels take only a 4-tap conv; a conv-state entry holds the 3 previous inputs.
inline constexpr int64_t kGdnConvKernel = 4;
inline constexpr int64_t kGdnConvHistory = kGdnConvKernel - 1;

// Hk key heads of dk, Hv value heads of dv (value head j reads key head j mod Hk).
struct GdnShape {
  int64_t hk, hv, dk, dv;
  int64_t dc() const { return 2 * hk * dk + hv * dv; }  // qkv channels: q | k | v
};

inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  quantize_row(DType::BF16, v.data(), bits.data(), static_cast<int64_t>(v.size()));
  return bits;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  dequantize_row(DType::BF16, bits.data(), v.data(), static_cast<int64_t>(bits.size()));
  return v;
}
inline void round_to_bf16(float* v, size_t n) {
  std::vector<float> x(v, v + n);
  const std::vector<float> r = from_bf16(to_bf16(x));
  std::copy(r.begin(), r.end(), v);
}

// Host copies of one launch's inputs, every row of every sequence (rows as in seq_row_begin).
struct GdnHostInputs {
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
inline void gdn_reference_rows(const GdnHostInputs& in, int64_t r0, int64_t t, float* conv_state, float* delta_state,
                               float* out, GdnRefDeltaState held = GdnRefDeltaState::kF32, float* conv_after_row = nullptr,
                               float* delta_after_row = nullptr) {
  const GdnShape& sh = in.sh;
  const int64_t dk_all = sh.hk * sh.dk, dc = sh.dc(), dv_all = sh.hv * sh.dv;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(sh.dk));
  std::vector<float> u(static_cast<size_t>(t * dc));
  CausalConvArgs conv{in.qkv + r0 * dc, dc, u.data(), dc, conv_state, in.conv_w, t, dc, kGdnConvKernel, conv_after_row};
  causal_conv1d_silu_ref(conv, serial_for());
  std::vector<float> g(static_cast<size_t>(t * sh.hv)), beta(g.size());
  for (int64_t i = 0; i < t; ++i) {
    float* row = u.data() + i * dc;
    for (int64_t h = 0; h < sh.hk; ++h) {
      l2_norm_ref(row + h * sh.dk, sh.dk, 1e-6f);
      l2_norm_ref(row + dk_all + h * sh.dk, sh.dk, 1e-6f);
      for (int64_t e = 0; e < sh.dk; ++e) row[h * sh.dk + e] *= q_scale;
    }
    for (int64_t j = 0; j < sh.hv; ++j) {
      const size_t at = static_cast<size_t>((r0 + i) * sh.hv + j);
      beta[static_cast<size_t>(i * sh.hv + j)] = 1.0f / (1.0f + std::exp(-in.b[at]));
      g[static_cast<size_t>(i * sh.hv + j)] =
          in.ssm_a[static_cast<size_t>(j)] * softplus(in.alpha[at] + in.dt_bias[static_cast<size_t>(j)]);
    }
  }
  if (held == GdnRefDeltaState::kF32) {
    GatedDeltaRuleArgs rule{u.data(), u.data() + dk_all, dc, u.data() + 2 * dk_all, dc, g.data(), beta.data(), out, dv_all,
                            delta_state, t, sh.hk, sh.hv, sh.dk, sh.dv, delta_after_row};
    gated_delta_rule_ref(rule, serial_for());
    return;
  }
  const size_t delta_floats = static_cast<size_t>(sh.hv * sh.dk * sh.dv);
  for (int64_t i = 0; i < t; ++i) {  // one row per call: the rounding sits between rows
    float* row = u.data() + i * dc;
    GatedDeltaRuleArgs rule{row, row + dk_all, dc, row + 2 * dk_all, dc, g.data() + i * sh.hv, beta.data() + i * sh.hv,
                            out + i * dv_all, dv_all, delta_state, 1, sh.hk, sh.hv, sh.dk, sh.dv};
    gated_delta_rule_ref(rule, serial_for());
    round_to_bf16(delta_state, delta_floats);
    if (delta_after_row != nullptr) {
      std::copy(delta_state, delta_state + delta_floats, delta_after_row + static_cast<size_t>(i) * delta_floats);
    }
  }
}

// The pools and outputs after one launch, as the CPU chain computes them.
struct GdnReferencePools {
  std::vector<float> delta;  // entries of [Hv][dk][dv]
  std::vector<float> conv;   // entries of [3][Dc]
  std::vector<float> out;    // [rows][Hv dv]
};

// Every sequence of one launch, with the kernels' pool indexing: sequence s (rows
// [seq_row_begin[s], seq_row_begin[s + 1])) starts from entry state_in[s] of the initial pools,
// writes its final states to entry state_out[s] (< 0: not written) and, where ring_first[s] >= 0,
// its states after row i to entry ring_first[s] + i. Empty ring_first: no snapshots. Entries
// written by no sequence keep their initial values.
inline GdnReferencePools gdn_reference(const GdnHostInputs& in, const std::vector<int32_t>& seq_row_begin,
                                       const std::vector<int32_t>& state_in, const std::vector<int32_t>& state_out,
                                       const std::vector<int32_t>& ring_first, const std::vector<float>& delta0,
                                       const std::vector<float>& conv0, GdnRefDeltaState held = GdnRefDeltaState::kF32) {
  const GdnShape& sh = in.sh;
  const auto delta_entry = static_cast<int64_t>(sh.hv * sh.dk * sh.dv), conv_entry = kGdnConvHistory * sh.dc();
  const int64_t num_seqs = static_cast<int64_t>(state_in.size());
  GdnReferencePools ref{delta0, conv0, std::vector<float>(static_cast<size_t>(seq_row_begin.back() * sh.hv * sh.dv))};
  for (int64_t s = 0; s < num_seqs; ++s) {
    const size_t si = static_cast<size_t>(s);
    const int64_t r0 = seq_row_begin[si], t = seq_row_begin[si + 1] - r0, e_in = state_in[si];
    std::vector<float> conv_state(conv0.begin() + conv_entry * e_in, conv0.begin() + conv_entry * (e_in + 1));
    std::vector<float> delta_state(delta0.begin() + delta_entry * e_in, delta0.begin() + delta_entry * (e_in + 1));
    const int64_t ring = ring_first.empty() ? -1 : ring_first[si];
    std::vector<float> conv_snap(ring >= 0 ? static_cast<size_t>(t * conv_entry) : 0);
    std::vector<float> delta_snap(ring >= 0 ? static_cast<size_t>(t * delta_entry) : 0);
    gdn_reference_rows(in, r0, t, conv_state.data(), delta_state.data(), ref.out.data() + r0 * sh.hv * sh.dv, held,
                       ring >= 0 ? conv_snap.data() : nullptr, ring >= 0 ? delta_snap.data() : nullptr);
    if (ring >= 0) {
      std::copy(delta_snap.begin(), delta_snap.end(), ref.delta.begin() + delta_entry * ring);
      std::copy(conv_snap.begin(), conv_snap.end(), ref.conv.begin() + conv_entry * ring);
    }
    const int64_t e_out = state_out[si];
    if (e_out < 0) continue;
    std::copy(delta_state.begin(), delta_state.end(), ref.delta.begin() + delta_entry * e_out);
    std::copy(conv_state.begin(), conv_state.end(), ref.conv.begin() + conv_entry * e_out);
  }
  return ref;
}

}  // namespace deltaserve::kernels::gputest
