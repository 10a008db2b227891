#include "runtime/dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include "kernels/embedding/embedding.h"
#include "kernels/matmul/matmul.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "runtime/greedy.h"

namespace deltaserve::runtime {
namespace {

// Drafts through the request's sampler (the picker): sampled and constrained requests, as
// MtpDrafter does (a constrained request's drafts must pass its grammar's mask).
bool samples(const SequencePlan& p) {
  return p.sampling != nullptr && (!p.sampling->greedy() || p.sampling->constraint != nullptr);
}

void matmul_rows(const void* w, kernels::DType type, size_t row_bytes, int64_t in, int64_t out, const float* x,
                 int64_t rows, float* y, const kernels::ParallelFor& pool) {
  kernels::MatmulArgs args{};
  args.w = w;
  args.w_type = type;
  args.num_in = in;
  args.num_out = out;
  args.w_row_bytes = row_bytes;
  args.x = x;
  args.num_rows = rows;
  args.x_stride = in;
  args.y = y;
  args.y_stride = out;
  kernels::matmul_ref(args, pool);
}

void rms_norm(const float* x, const std::vector<float>& w, int64_t n, int64_t rows, float eps, float* y,
              const kernels::ParallelFor& pool) {
  kernels::rms_norm_ref({x, n, w.data(), y, n, rows, n, eps}, pool);
}

}  // namespace

DFlashDrafter::DFlashDrafter(DFlashModel model, const TensorView& token_embd, const TensorView& output, int num_threads)
    : model_(std::move(model)), token_embd_(token_embd), output_(output), pool_(num_threads) {
  if (token_embd_.ne[0] != model_.config.hidden || output_.ne[0] != model_.config.hidden)
    throw std::invalid_argument("DFlash drafter: the target's embedding and LM head must have H = " + std::to_string(model_.config.hidden));
}

void DFlashDrafter::linear(const std::vector<float>& w, int64_t in, int64_t out, const float* x, int64_t rows, float* y) const {
  matmul_rows(w.data(), kernels::DType::F32, static_cast<size_t>(in) * sizeof(float), in, out, x, rows, y, pool_);
}

void DFlashDrafter::norm_rope(float* x, int64_t rows, int64_t heads, const std::vector<float>& norm, const int32_t* positions) const {
  const DFlashConfig& c = model_.config;
  kernels::rms_norm_ref({x, c.head_dim, norm.data(), x, c.head_dim, rows * heads, c.head_dim, c.rms_eps}, pool_);
  kernels::rope_neox_ref({x, heads * c.head_dim, c.head_dim, positions, rows, heads, c.head_dim, c.rope_theta});
}

void DFlashDrafter::catch_up(const std::vector<CatchUp>& rows) {
  const DFlashConfig& c = model_.config;
  const int64_t h = c.hidden, kv = c.num_kv_heads * c.head_dim;
  const int64_t in = static_cast<int64_t>(c.target_layer_ids.size()) * h;
  for (const CatchUp& u : rows) {
    if (u.num_rows <= 0) continue;
    State& s = states_[u.seq->id];
    // The context must continue at this step's first position; anything else (a new,
    // preempted or restored sequence) starts it over here.
    if (s.k.empty() || s.first_position + s.num_rows != u.seq->num_cached_tokens) {
      s.first_position = u.seq->num_cached_tokens;
      s.num_rows = 0;
      s.k.assign(static_cast<size_t>(c.num_layers), {});
      s.v.assign(static_cast<size_t>(c.num_layers), {});
    }
    const int64_t n = u.num_rows;
    std::vector<float> ctx(static_cast<size_t>(n * h));
    linear(model_.fc, in, h, u.features, n, ctx.data());
    rms_norm(ctx.data(), model_.hidden_norm, h, n, c.rms_eps, ctx.data(), pool_);
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) positions[static_cast<size_t>(r)] = s.first_position + s.num_rows + static_cast<int32_t>(r);
    std::vector<float> k(static_cast<size_t>(n * kv)), v(k.size());
    for (size_t l = 0; l < model_.layers.size(); ++l) {
      const DFlashLayer& lw = model_.layers[l];
      linear(lw.wk, h, kv, ctx.data(), n, k.data());
      linear(lw.wv, h, kv, ctx.data(), n, v.data());
      norm_rope(k.data(), n, c.num_kv_heads, lw.k_norm, positions.data());
      s.k[l].insert(s.k[l].end(), k.begin(), k.end());
      s.v[l].insert(s.v[l].end(), v.begin(), v.end());
    }
    s.num_rows += static_cast<int32_t>(n);
  }
}

void DFlashDrafter::layer_forward(size_t l, const std::vector<Block>& blocks, const std::vector<int32_t>& positions,
                                  std::vector<float>& x) const {
  const DFlashConfig& c = model_.config;
  const DFlashLayer& lw = model_.layers[l];
  const int64_t n = static_cast<int64_t>(positions.size()), h = c.hidden, d = c.head_dim;
  const int64_t q_width = c.num_heads * d, kv = c.num_kv_heads * d, group = c.num_heads / c.num_kv_heads;
  std::vector<float> a(x.size()), q(static_cast<size_t>(n * q_width)), k(static_cast<size_t>(n * kv)), v(k.size());
  rms_norm(x.data(), lw.input_norm, h, n, c.rms_eps, a.data(), pool_);
  linear(lw.wq, h, q_width, a.data(), n, q.data());
  linear(lw.wk, h, kv, a.data(), n, k.data());
  linear(lw.wv, h, kv, a.data(), n, v.data());
  norm_rope(q.data(), n, c.num_heads, lw.q_norm, positions.data());
  norm_rope(k.data(), n, c.num_kv_heads, lw.k_norm, positions.data());

  // Non-causal attention of each block row over its stream's context rows and block rows.
  std::vector<float> attn(q.size(), 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t num_tasks = static_cast<int64_t>(blocks.size()) * c.num_heads;
  pool_.run(num_tasks, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const Block& b = blocks[static_cast<size_t>(task / c.num_heads)];
      const int64_t head = task % c.num_heads, kv_head = head / group;
      const int64_t num_ctx = b.state->num_rows, total = num_ctx + b.num_rows;
      const float* ctx_k = b.state->k[l].data();
      const float* ctx_v = b.state->v[l].data();
      scores.resize(static_cast<size_t>(total));
      for (int32_t r = 0; r < b.num_rows; ++r) {
        const float* qr = q.data() + (b.first_row + r) * q_width + head * d;
        float best = -INFINITY;
        for (int64_t t = 0; t < total; ++t) {
          const float* kt = t < num_ctx ? ctx_k + t * kv + kv_head * d : k.data() + (b.first_row + t - num_ctx) * kv + kv_head * d;
          float dot = 0.0f;
          for (int64_t e = 0; e < d; ++e) dot += qr[e] * kt[e];
          scores[static_cast<size_t>(t)] = dot * scale;
          best = std::max(best, dot * scale);
        }
        float sum = 0.0f;
        for (float& s : scores) sum += (s = std::exp(s - best));
        float* out = attn.data() + (b.first_row + r) * q_width + head * d;
        for (int64_t t = 0; t < total; ++t) {
          const float* vt = t < num_ctx ? ctx_v + t * kv + kv_head * d : v.data() + (b.first_row + t - num_ctx) * kv + kv_head * d;
          const float w = scores[static_cast<size_t>(t)] / sum;
          for (int64_t e = 0; e < d; ++e) out[e] += w * vt[e];
        }
      }
    }
  });
  linear(lw.wo, q_width, h, attn.data(), n, a.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];

  // SwiGLU MLP.
  const int64_t inter = c.intermediate;
  std::vector<float> gate(static_cast<size_t>(n * inter)), up(gate.size());
  rms_norm(x.data(), lw.post_norm, h, n, c.rms_eps, a.data(), pool_);
  linear(lw.w_gate, h, inter, a.data(), n, gate.data());
  linear(lw.w_up, h, inter, a.data(), n, up.data());
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  linear(lw.w_down, inter, h, gate.data(), n, a.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
}

std::vector<std::vector<int32_t>> DFlashDrafter::draft(const StepPlan& plan, const MtpDrafter::DraftPicker& pick) {
  const DFlashConfig& c = model_.config;
  std::vector<std::vector<int32_t>> drafts(plan.sequences.size());
  std::vector<Block> blocks;
  std::vector<int32_t> tokens, positions;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const SequencePlan& p = plan.sequences[i];
    const int32_t depth = std::min(p.draft_depth, max_drafts());
    if (depth <= 0 || !p.speculative || p.tokens.size() != 1) continue;
    const auto it = states_.find(p.id);
    // The context must end right before the anchor (the step's one token).
    if (it == states_.end() || it->second.num_rows == 0 ||
        it->second.first_position + it->second.num_rows != p.num_cached_tokens)
      continue;
    blocks.push_back({i, &it->second, static_cast<int64_t>(tokens.size()), 1 + depth, p.num_cached_tokens});
    for (int32_t r = 0; r <= depth; ++r) {
      tokens.push_back(r == 0 ? p.tokens[0] : c.mask_token_id);
      positions.push_back(p.num_cached_tokens + r);
    }
  }
  if (blocks.empty()) return drafts;

  const int64_t n = static_cast<int64_t>(tokens.size()), h = c.hidden;
  std::vector<float> x(static_cast<size_t>(n * h));
  kernels::embedding_lookup_ref(token_embd_.data, token_embd_.type, h, tokens.data(), n, x.data());
  for (size_t l = 0; l < model_.layers.size(); ++l) layer_forward(l, blocks, positions, x);
  rms_norm(x.data(), model_.norm, h, n, c.rms_eps, x.data(), pool_);

  // Logits of the draft rows (every block row but the anchor), one LM-head matmul.
  std::vector<float> rows;
  for (const Block& b : blocks) {
    for (int32_t r = 1; r < b.num_rows; ++r) rows.insert(rows.end(), x.begin() + (b.first_row + r) * h, x.begin() + (b.first_row + r + 1) * h);
  }
  const int64_t num_draft_rows = static_cast<int64_t>(rows.size()) / h, vocab = output_.ne[1];
  std::vector<float> logits(static_cast<size_t>(num_draft_rows * vocab));
  matmul_rows(output_.data, output_.type, output_.row_bytes(), h, vocab, rows.data(), num_draft_rows, logits.data(), pool_);
  if (c.output_multiplier != 1.0f || c.logit_softcap > 0.0f) {
    for (float& l : logits) {
      l *= c.output_multiplier;
      if (c.logit_softcap > 0.0f) l = std::tanh(l / c.logit_softcap) * c.logit_softcap;
    }
  }
  int64_t row = 0;
  for (const Block& b : blocks) {
    const SequencePlan& p = plan.sequences[b.seq_index];
    for (int32_t j = 0; j + 1 < b.num_rows; ++j, ++row) {
      const std::span<const float> l(logits.data() + row * vocab, static_cast<size_t>(vocab));
      drafts[b.seq_index].push_back(pick && samples(p) ? pick(b.seq_index, j, l) : argmax_token(l.data(), vocab));
    }
  }
  return drafts;
}

void DFlashDrafter::retain(const std::vector<RequestId>& live) {
  const std::unordered_set<RequestId> keep(live.begin(), live.end());
  std::erase_if(states_, [&](const auto& entry) { return !keep.contains(entry.first); });
}

int32_t DFlashDrafter::context_rows(RequestId id) const {
  const auto it = states_.find(id);
  return it == states_.end() ? -1 : it->second.num_rows;
}

}  // namespace deltaserve::runtime
