#include "runtime/draft_verifier.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace deltaserve::runtime {
namespace {

// norm(max(0, p - q)) as unnormalised weights in p's probability units.
TokenDistribution residual(const TokenDistribution& p, const TokenDistribution& q) {
  TokenDistribution r;
  r.weights.assign(p.weights.size(), 0.0);
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const double d = p.weights[i] / p.total - q.weights[i] / q.total;
    if (d > 0.0) {
      r.weights[i] = d;
      r.total += d;
    }
  }
  return r;
}

}  // namespace

int32_t draw_draft(const Sampler& draft_sampler, std::span<const float> head_logits, uint64_t position,
                   TokenDistribution& q) {
  q = draft_sampler.distribution(draft_sampler.processed_logits(head_logits));
  if (q.empty()) throw std::invalid_argument("draw_draft: empty logits row");
  return draw_token(q, sampler_uniform(draft_sampler.seed(), position, DrawStream::Draft));
}

int32_t draw_coupled_draft(const Sampler& draft_sampler, std::span<const float> head_logits, uint64_t position) {
  const TokenDistribution q = draft_sampler.distribution(draft_sampler.processed_logits(head_logits));
  if (q.empty()) throw std::invalid_argument("draw_coupled_draft: empty logits row");
  return draw_token(q, sampler_uniform(draft_sampler.seed(), position, DrawStream::Token));
}

DraftDecision decide_draft(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, uint64_t seed,
                           uint64_t position) {
  if (p.weights.size() != q.weights.size())
    throw std::invalid_argument("decide_draft: target vocabulary " + std::to_string(p.weights.size()) +
                                " but draft vocabulary " + std::to_string(q.weights.size()));
  const bool in_range = draft >= 0 && static_cast<size_t>(draft) < p.weights.size();
  if (in_range) {
    const double q_x = q.probability(draft);
    const double p_x = p.probability(draft);
    // u < p/q with u uniform in [0, 1): probability min(1, p/q).
    if (q_x > 0.0 && sampler_uniform(seed, position, DrawStream::Accept) * q_x < p_x) return {draft, true};
  }
  const double u = sampler_uniform(seed, position, DrawStream::Token);
  const TokenDistribution r = residual(p, q);
  // The residual's mass equals the rejection probability, so it is > 0 whenever a rejection
  // can happen; only rounding (p == q up to an ulp) can leave it empty.
  return {r.total > 0.0 ? draw_token(r, u) : draw_token(p, u), false};
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
