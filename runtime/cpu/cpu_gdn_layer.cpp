// Gated DeltaNet mixer on the CPU (MODEL.md 2.5): projections over all rows of the step, then
// conv, L2 norms and the delta rule per sequence from its state slot, gated norm, output.
#include <cmath>
#include <vector>

#include "kernels/gdn/conv1d.h"
#include "kernels/gdn/gated_delta_rule.h"
#include "kernels/norm/norm.h"
#include "runtime/cpu/cpu_layers.h"

namespace deltaserve::runtime::cpu {
namespace {

// PyTorch's softplus (beta 1, threshold 20): linear above the threshold.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void gdn_forward(const LayerContext& ctx, const GdnWeights& w, GdnStateLayer& state,
                 const StepRows& rows, const float* a, float* y) {
  const ModelConfig& c = ctx.config;
  const int64_t n = rows.num_rows();
  const int64_t dc = c.conv_channels(), dk_all = c.ssm_key_dim(), dv_all = c.ssm_value_dim();
  const int64_t hv = c.ssm_v_heads, hk = c.ssm_k_heads, d = c.ssm_head_dim;
  const int64_t history = c.conv_kernel - 1;

  std::vector<float> qkv(static_cast<size_t>(n * dc)), z(static_cast<size_t>(n * dv_all));
  std::vector<float> beta(static_cast<size_t>(n * hv)), alpha(static_cast<size_t>(n * hv));
  matmul(ctx, w.qkv, a, n, qkv.data());
  matmul(ctx, w.gate, a, n, z.data());
  matmul(ctx, w.beta, a, n, beta.data());
  matmul(ctx, w.alpha, a, n, alpha.data());

  // beta = sigmoid(b); g = -exp(A_log) * softplus(alpha + dt_bias), per value head.
  const float* ssm_a = f32_data(w.a);
  const float* dt_bias = f32_data(w.dt_bias);
  std::vector<float> g(static_cast<size_t>(n * hv));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < hv; ++j) {
      const size_t i = static_cast<size_t>(r * hv + j);
      beta[i] = 1.0f / (1.0f + std::exp(-beta[i]));
      g[i] = ssm_a[j] * softplus(alpha[i] + dt_bias[j]);
    }
  }

  std::vector<float> u(static_cast<size_t>(n * dc)), o(static_cast<size_t>(n * dv_all));
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (const SequenceRows& seq : rows.sequences) {
    const int64_t r0 = seq.row_begin;
    kernels::CausalConvArgs conv{};
    conv.x = qkv.data() + r0 * dc;
    conv.x_stride = dc;
    conv.y = u.data() + r0 * dc;
    conv.y_stride = dc;
    const size_t conv_floats = static_cast<size_t>(history * dc), delta_floats = static_cast<size_t>(hv * d * d);
    const size_t entry = static_cast<size_t>(seq.state_entry);
    conv.state = state.conv.data() + entry * conv_floats;
    conv.w = f32_data(w.conv);
    conv.num_tokens = seq.num_rows;
    conv.channels = dc;
    conv.kernel = c.conv_kernel;
    // Verify rows: the snapshots go to the ring entries; the entry the rows started from is
    // updated in place as well and is left behind (the live state moves to a ring entry).
    const bool ring = seq.keep_row_states && seq.ring_first >= 0;
    const size_t ring_first = ring ? static_cast<size_t>(seq.ring_first) : 0;
    if (ring) conv.state_after_row = state.conv.data() + ring_first * conv_floats;
    kernels::causal_conv1d_silu_ref(conv, ctx.pool);

    // L2-normalise q and k per key head; fold the dk^-1/2 scale into q.
    for (int64_t r = r0; r < r0 + seq.num_rows; ++r) {
      float* row = u.data() + r * dc;
      for (int64_t h = 0; h < hk; ++h) {
        float* q = row + h * d;
        float* k = row + dk_all + h * d;
        kernels::l2_norm_ref(q, d, 1e-6f);
        kernels::l2_norm_ref(k, d, 1e-6f);
        for (int64_t i = 0; i < d; ++i) q[i] *= q_scale;
      }
    }

    kernels::GatedDeltaRuleArgs rule{};
    rule.q = u.data() + r0 * dc;
    rule.k = rule.q + dk_all;
    rule.qk_stride = dc;
    rule.v = rule.q + 2 * dk_all;
    rule.v_stride = dc;
    rule.g = g.data() + r0 * hv;
    rule.beta = beta.data() + r0 * hv;
    rule.out = o.data() + r0 * dv_all;
    rule.out_stride = dv_all;
    rule.state = state.delta.data() + entry * delta_floats;
    if (ring) rule.state_after_row = state.delta.data() + ring_first * delta_floats;
    rule.num_tokens = seq.num_rows;
    rule.num_k_heads = hk;
    rule.num_v_heads = hv;
    rule.head_dim_k = d;
    rule.head_dim_v = d;
    rule.first_position = seq.first_position;
    // A single row gains nothing from chunking, and verify rows need their snapshots.
    if (ctx.gdn_chunked_prefill && !ring && seq.num_rows > 1) {
      kernels::gated_delta_rule_chunked(rule, ctx.pool);
    } else {
      kernels::gated_delta_rule_ref(rule, ctx.pool);
    }
  }

  kernels::GatedRmsNormArgs norm{o.data(), z.data(), f32_data(w.norm), o.data(), n * hv, d, c.rms_eps};
  kernels::gated_rms_norm_ref(norm, ctx.pool);
  matmul(ctx, w.output, o.data(), n, y);
}

}  // namespace deltaserve::runtime::cpu
