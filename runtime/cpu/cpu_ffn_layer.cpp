// FFN on the CPU (MODEL.md 2.6): dense SwiGLU, or MoE: softmax top-k routing, experts run
// over the rows routed to them (grouped), weighted sum in rank order per row (so a row's
// result does not depend on the other rows), plus the sigmoid-gated shared expert.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/moe/moe.h"
#include "runtime/cpu/cpu_layers.h"

namespace deltaserve::runtime::cpu {
namespace {

// y = down(SiLU(gate x) * up x) for one (possibly stacked) weight set.
void swiglu_mlp(const LayerContext& ctx, const TensorView& gate, const TensorView& up,
                const TensorView& down, const float* x, int64_t num_rows, float* y, int64_t expert) {
  const int64_t width = gate.ne[1];
  std::vector<float> g(static_cast<size_t>(num_rows * width)), u(static_cast<size_t>(num_rows * width));
  matmul(ctx, gate, x, num_rows, g.data(), expert);
  matmul(ctx, up, x, num_rows, u.data(), expert);
  kernels::swiglu_ref(g.data(), u.data(), g.data(), num_rows * width);
  matmul(ctx, down, g.data(), num_rows, y, expert);
}

void moe_forward(const LayerContext& ctx, const FfnWeights& w, int64_t n, const float* b, float* y) {
  const ModelConfig& c = ctx.config;
  const int64_t h = c.num_embd, e_count = c.num_experts, k = c.num_experts_used;

  std::vector<float> logits(static_cast<size_t>(n * e_count));
  matmul(ctx, w.router, b, n, logits.data());
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> weights(static_cast<size_t>(n * k));
  kernels::moe_route_ref({logits.data(), n, e_count, k, ids.data(), weights.data()});

  // Group (row, rank) pairs by expert, run each expert once over its rows.
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(e_count));
  for (int64_t i = 0; i < n * k; ++i) routed[static_cast<size_t>(ids[static_cast<size_t>(i)])].push_back(i);
  std::vector<float> expert_out(static_cast<size_t>(n * k * h));  // [row][rank][H]
  std::vector<float> x, out;
  for (int64_t e = 0; e < e_count; ++e) {
    const std::vector<int64_t>& items = routed[static_cast<size_t>(e)];
    if (items.empty()) continue;
    const int64_t m = static_cast<int64_t>(items.size());
    x.resize(static_cast<size_t>(m * h));
    out.resize(static_cast<size_t>(m * h));
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(x.data() + j * h, b + (items[static_cast<size_t>(j)] / k) * h, sizeof(float) * static_cast<size_t>(h));
    swiglu_mlp(ctx, w.gate_exps, w.up_exps, w.down_exps, x.data(), m, out.data(), e);
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(expert_out.data() + items[static_cast<size_t>(j)] * h, out.data() + j * h,
                  sizeof(float) * static_cast<size_t>(h));
  }

  std::vector<float> shared(static_cast<size_t>(n * h));
  swiglu_mlp(ctx, w.gate_shexp, w.up_shexp, w.down_shexp, b, n, shared.data(), -1);
  const float* shared_gate = f32_data(w.shared_gate_inp);
  for (int64_t r = 0; r < n; ++r) {
    float* yr = y + r * h;
    std::memset(yr, 0, sizeof(float) * static_cast<size_t>(h));
    for (int64_t rank = 0; rank < k; ++rank) {
      const float wt = weights[static_cast<size_t>(r * k + rank)];
      const float* er = expert_out.data() + (r * k + rank) * h;
      for (int64_t i = 0; i < h; ++i) yr[i] += wt * er[i];
    }
    float gate_logit = 0.0f;
    for (int64_t i = 0; i < h; ++i) gate_logit += shared_gate[i] * b[r * h + i];
    const float gate = 1.0f / (1.0f + std::exp(-gate_logit));
    for (int64_t i = 0; i < h; ++i) yr[i] += gate * shared[static_cast<size_t>(r * h + i)];
  }
}

}  // namespace

void ffn_forward(const LayerContext& ctx, const FfnWeights& w, int64_t num_rows, const float* b, float* y) {
  if (ctx.config.is_moe()) {
    moe_forward(ctx, w, num_rows, b, y);
  } else {
    swiglu_mlp(ctx, w.gate, w.up, w.down, b, num_rows, y, -1);
  }
}

}  // namespace deltaserve::runtime::cpu
