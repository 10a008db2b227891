#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/gdn/conv1d.h"
#include "kernels/gdn/gated_delta_rule.h"
#include "kernels/gdn/gdn.h"
#include "kernels/norm/norm.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"

namespace deltaserve::kernels {
namespace {

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// v rounded to bf16 (nearest even) and back, in place: a bf16 pool's value.
void round_to_bf16(float* v, size_t n) {
  std::vector<uint16_t> bits(n);
  quantize_row(DType::BF16, v, bits.data(), static_cast<int64_t>(n));
  dequantize_row(DType::BF16, bits.data(), v, static_cast<int64_t>(n));
}

}  // namespace

void gdn_rows_ref(const GdnRefInputs& in, int64_t r0, int64_t t, float* conv_state, float* delta_state, float* out,
                  GdnRefDeltaState held, float* conv_after_row, float* delta_after_row) {
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

GdnRefPools gdn_ref(const GdnRefInputs& in, const std::vector<int32_t>& seq_row_begin, const std::vector<int32_t>& state_in,
                    const std::vector<int32_t>& state_out, const std::vector<int32_t>& ring_first,
                    const std::vector<float>& delta0, const std::vector<float>& conv0, GdnRefDeltaState held) {
  const GdnShape& sh = in.sh;
  const auto delta_entry = static_cast<int64_t>(sh.hv * sh.dk * sh.dv), conv_entry = kGdnConvHistory * sh.dc();
  const int64_t num_seqs = static_cast<int64_t>(state_in.size());
  GdnRefPools ref{delta0, conv0, std::vector<float>(static_cast<size_t>(seq_row_begin.back() * sh.hv * sh.dv))};
  for (int64_t s = 0; s < num_seqs; ++s) {
    const size_t si = static_cast<size_t>(s);
    const int64_t r0 = seq_row_begin[si], t = seq_row_begin[si + 1] - r0, e_in = state_in[si];
    std::vector<float> conv_state(conv0.begin() + conv_entry * e_in, conv0.begin() + conv_entry * (e_in + 1));
    std::vector<float> delta_state(delta0.begin() + delta_entry * e_in, delta0.begin() + delta_entry * (e_in + 1));
    const int64_t ring = ring_first.empty() ? -1 : ring_first[si];
    std::vector<float> conv_snap(ring >= 0 ? static_cast<size_t>(t * conv_entry) : 0);
    std::vector<float> delta_snap(ring >= 0 ? static_cast<size_t>(t * delta_entry) : 0);
    gdn_rows_ref(in, r0, t, conv_state.data(), delta_state.data(), ref.out.data() + r0 * sh.hv * sh.dv, held,
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

}  // namespace deltaserve::kernels
