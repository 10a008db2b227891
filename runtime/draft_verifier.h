// Verification of drafted tokens against the target model's rows, on the host for every
// backend (greedy requests of a GPU backend compare with its device argmax ids).
//
// Sampled requests use standard speculative sampling (Leviathan et al., "Fast Inference from
// Transformers via Speculative Decoding", 2023; Chen et al., "Accelerating Large Language
// Model Decoding with Speculative Sampling", 2023). Draft i is a token x_i drawn from the
// draft distribution q_i; at its verify row the target distribution is p_i. The draft is
// accepted with probability min(1, p_i(x_i) / q_i(x_i)); the first rejection emits a token
// drawn from the residual norm(max(0, p_i - q_i)) and ends the block; when every draft
// passes, the row after the last one emits a token drawn from p. Each emitted token is then
// distributed exactly as p given the tokens before it, whatever q is, so speculation never
// changes the output distribution. p and q are both Sampler::distribution(): the request's
// bias, penalties, temperature, min-p, top-k and top-p, so q may put mass where p has none
// (such drafts are always rejected).
//
// Greedy requests (temperature 0) accept a draft while it equals the target argmax, so their
// output is token for token the output without drafts. Drafts that come without q are
// verified the same exact way (accept while equal to the token the row samples), which also
// keeps the distribution.
//
// Uniforms are keyed by (seed, output position, DrawStream), never by batch position: a
// draft's draw (Draft), its acceptance test (Accept) and the emitted token (Token) come from
// independent streams, and a position draws at most once from each.
//
// Thread: the caller's; the functions are pure except that verify_drafts() advances the
// sampler over the tokens it emits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampler.h"

namespace deltaserve::runtime {

// Draws the draft for output `position` of a sampled request from the draft head's logits
// row through the request's transforms. draft_sampler: the request's sampler advanced over
// the earlier drafts of this block (penalties see them as the target rows will). q receives
// the distribution the draft was drawn from.
int32_t draw_draft(const Sampler& draft_sampler, std::span<const float> head_logits, uint64_t position,
                   TokenDistribution& q);

// The draft for a request that must reproduce its output token for token (an explicit seed):
// drawn from q with the very uniform the target row will use for its own token (stream
// Token), so when q is close to p the inverse-CDF draws coincide. Verified exactly (without
// q): the emitted tokens are the ones the request gives without drafts, whatever the draft
// depth the load allowed, and their distribution is the target's.
int32_t draw_coupled_draft(const Sampler& draft_sampler, std::span<const float> head_logits, uint64_t position);

struct DraftDecision {
  int32_t id = -1;        // the emitted token: the draft, or the residual draw
  bool accepted = false;  // id is the draft; the block goes on
};

// The verify row of draft `draft` (drawn from q) at output `position`, where the target's
// distribution is p (same vocabulary). Accepts with probability min(1, p/q), else emits a
// draw from norm(max(0, p - q)) (from p itself in the measure-zero case that rounding left
// the residual empty).
DraftDecision decide_draft(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, uint64_t seed,
                           uint64_t position);

// Verifies one sequence's drafts: target_logits holds drafts.size() + 1 rows of num_vocab,
// row r scoring output position sampler.num_output_tokens() + r. q is parallel to drafts for
// a sampled request (empty: exact verification). Returns the emitted tokens (1 + accepted
// drafts) with their logprobs (those of p, as without drafts); the sampler accepts each.
std::vector<SampledToken> verify_drafts(Sampler& sampler, std::span<const float> target_logits, int64_t num_vocab,
                                        std::span<const int32_t> drafts, std::span<const TokenDistribution> q);

}  // namespace deltaserve::runtime
