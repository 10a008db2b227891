#include "runtime/draft_verifier.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace deltaserve::runtime {
namespace {

// max(0, p - q), unnormalised, in p's probability units (doubles: p and q have different totals).
struct Residual {
  std::vector<double> weights;
  double total = 0;
};
Residual residual(const TokenDistribution& p, const TokenDistribution& q) {
  Residual r;
  r.weights.assign(p.mass.size(), 0.0);
  for (size_t i = 0; i < p.mass.size(); ++i) {
    const double d = p.probability(static_cast<int32_t>(i)) - q.probability(static_cast<int32_t>(i));
    if (d > 0.0) {
      r.weights[i] = d;
      r.total += d;
    }
  }
  return r;
}

// Inverse CDF of the residual in id order: the first id whose running weight exceeds u * total.
int32_t draw_residual(const Residual& r, double u) {
  const double target = u * r.total;
  double cumulative = 0;
  int32_t last = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(r.weights.size()); ++i) {
    if (r.weights[static_cast<size_t>(i)] == 0.0) continue;
    cumulative += r.weights[static_cast<size_t>(i)];
    if (target < cumulative) return i;
    last = i;
  }
  return last;  // u * total rounded up to the total: the last kept id
}

}  // namespace

int32_t draw_draft(const Sampler& draft_sampler, std::span<const float> head_logits, uint64_t position,
                   TokenDistribution& q) {
  q = draft_sampler.distribution(draft_sampler.processed_logits(head_logits));
  if (q.empty()) throw std::invalid_argument("draw_draft: empty logits row");
  return draw_token(q, sampler_word(draft_sampler.seed(), position, DrawStream::Draft));
}

int32_t draw_coupled_draft(const Sampler& draft_sampler, std::span<const float> head_logits, uint64_t position) {
  const TokenDistribution q = draft_sampler.distribution(draft_sampler.processed_logits(head_logits));
  if (q.empty()) throw std::invalid_argument("draw_coupled_draft: empty logits row");
  return draw_token(q, sampler_word(draft_sampler.seed(), position, DrawStream::Token));
}

DraftDecision decide_draft(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, uint64_t seed,
                           uint64_t position) {
  if (p.mass.size() != q.mass.size())
    throw std::invalid_argument("decide_draft: target vocabulary " + std::to_string(p.mass.size()) +
                                " but draft vocabulary " + std::to_string(q.mass.size()));
  const bool in_range = draft >= 0 && static_cast<size_t>(draft) < p.mass.size();
  if (in_range) {
    const double q_x = q.probability(draft);
    const double p_x = p.probability(draft);
    // u < p/q with u uniform in [0, 1): probability min(1, p/q).
    if (q_x > 0.0 && sampler_uniform(seed, position, DrawStream::Accept) * q_x < p_x) return {draft, true};
  }
  const uint32_t word = sampler_word(seed, position, DrawStream::Token);
  const Residual r = residual(p, q);
  // The residual's mass equals the rejection probability, so it is > 0 whenever a rejection
  // can happen; only rounding (p == q up to an ulp) can leave it empty.
  return {r.total > 0.0 ? draw_residual(r, word * (1.0 / 4294967296.0)) : draw_token(p, word), false};
}

std::vector<SampledToken> verify_drafts(Sampler& sampler, std::span<const float> target_logits, int64_t num_vocab,
                                        std::span<const int32_t> drafts, std::span<const TokenDistribution> q) {
  const size_t num_rows = drafts.size() + 1;
  if (num_vocab <= 0 || target_logits.size() != num_rows * static_cast<size_t>(num_vocab))
    throw std::invalid_argument("verify_drafts: " + std::to_string(target_logits.size()) + " logits for " +
                                std::to_string(num_rows) + " rows of " + std::to_string(num_vocab));
  const bool speculative = !sampler.params().greedy() && !q.empty();
  if (speculative && q.size() != drafts.size())
    throw std::invalid_argument("verify_drafts: " + std::to_string(q.size()) + " draft distributions for " +
                                std::to_string(drafts.size()) + " drafts");
  std::vector<SampledToken> emitted;
  for (size_t r = 0; r < num_rows; ++r) {
    const std::span<const float> row = target_logits.subspan(r * static_cast<size_t>(num_vocab), static_cast<size_t>(num_vocab));
    const uint64_t position = static_cast<uint64_t>(sampler.num_output_tokens());
    bool accepted = false;
    if (speculative && r < drafts.size()) {
      const std::vector<float> processed = sampler.processed_logits(row);
      const DraftDecision d = decide_draft(sampler.distribution(processed), q[r], drafts[r], sampler.seed(), position);
      emitted.push_back(sampler.describe(processed, d.id));
      accepted = d.accepted;
    } else {
      // Greedy, exact verification, or the row after the last draft: a plain draw from p.
      emitted.push_back(sampler.sample(row));
      accepted = r < drafts.size() && emitted.back().id == drafts[r];
    }
    sampler.accept(emitted.back().id);
    if (!accepted) break;
  }
  return emitted;
}

}  // namespace deltaserve::runtime
