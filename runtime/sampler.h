// The host sampler. Greedy rows take the argmax (runtime/greedy.h); a GPU backend computes it
// on the device. Sampled rows follow one rule on every backend (kernels/sampling/draw_ref.h):
// a row whose request needs only the draw (no bias, penalty, constraint or logprobs) may be
// drawn on the device (kernels/sampling/draw_gpu.h), bit for bit the token this sampler draws.
//
// Per row: logits -> + logit_bias -> repetition penalty (prompt and output tokens) ->
// frequency/presence penalties (output tokens) -> the constraint's mask (-inf for tokens its
// grammar refuses next; params.constraint) = the "processed" logits. Logprobs are the
// log-softmax of the processed logits: after penalties and bias, before temperature and any
// filtering (vLLM's "processed_logprobs"; OpenAI reports the model's distribution, not the
// truncated sampling one). Then greedy = argmax of the processed logits (runtime/greedy.h:
// lowest id on ties, NaN never wins); otherwise the draw rule: every token's integer mass
// from exp(l / T - max) (2^-40 resolution), min-p (relative to the top weight) -> top-k ->
// top-p (shortest most-likely prefix whose mass reaches top_p of the mass left) -> one draw
// by inverse CDF over the kept tokens in id order. Masses are integers, so every sum is
// exact and the rule is the same bits on the host and the device.
//
// Randomness is counter-based: the 32 random bits for output position n of a request are
// Philox4x32-10 keyed by the request's seed with counter (n, stream). So the same seed and
// request give the same tokens whatever else shares the batch, in any order, on any backend.
// Speculative sampling (runtime/draft_verifier.h) draws its draft, acceptance and token
// uniforms from separate streams of the same key, so they are independent of each other.
//
// The steps split into processed_logits() -> distribution() (the masses a draw samples from)
// -> draw_token(), so draft verification can compare two distributions built by exactly the
// code that samples.
//
// Owner: one Sampler per request, used by one thread at a time; sample()/sample_at() are
// const and may run concurrently with each other but not with accept(). Copyable (the draft
// head drafts ahead with a copy).
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/parallel.h"
#include "kernels/sampling/draw_ref.h"
#include "runtime/grammar/constraint.h"
#include "runtime/sampling_params.h"

namespace deltaserve::runtime {

// Philox4x32-10 (Salmon et al., SC'11): 4 x 32 random bits for (key, counter); the 128-bit
// counter is (counter low, counter high, stream, 0).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter, uint32_t stream = 0);
// Independent Philox streams of one request key; each output position draws at most once
// from each stream, so no uniform is ever reused.
enum class DrawStream : uint32_t {
  Token = 0,   // the emitted token: plain decode, the bonus row, the residual after a rejection
  Accept = 1,  // the acceptance test of a draft (speculative sampling)
  Draft = 2,   // the draft head's draw from its own distribution q
};
// The 32 random bits for (seed, position, stream): the first Philox word of counter
// (position, stream). Stream Token is the counter (position, 0).
uint32_t sampler_word(uint64_t seed, uint64_t position, DrawStream stream = DrawStream::Token);
// The same as a uniform in [0, 1): word / 2^32.
double sampler_uniform(uint64_t seed, uint64_t position, DrawStream stream = DrawStream::Token);

// What one draw samples from, over the whole vocabulary: the integer masses of the tokens kept
// by min-p, top-k and top-p, exactly 0 elsewhere (kernels/sampling/draw_ref.h); greedy is
// one-hot on the argmax.
using TokenDistribution = kernels::DrawMasses;
// Inverse CDF in id order: the first id whose running mass exceeds floor(total * word / 2^32).
int32_t draw_token(const TokenDistribution& dist, uint32_t word);

// The draw rule's parameters of a (not greedy) request at output `position`: its temperature,
// top-k, top-p and min-p, and the Token stream's bits of (seed, position).
kernels::DrawParams draw_params_of(const SamplingParams& params, uint64_t seed, uint64_t position);
// Whether a request's tokens are exactly the draw rule over the raw logits rows and it needs
// nothing else from them (sampled; no bias, penalty, constraint or logprobs): a backend may
// draw them on its device (SequenceStep::draws) and never copy those logits.
bool only_draw_needed(const SamplingParams& params);

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;                     // set when params.logprobs or top_logprobs > 0
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries, most likely first
};

class Sampler {
 public:
  // `seed`: params.seed when the request set one, else a value the caller draws (per request)
  // so unseeded requests differ.
  Sampler(SamplingParams params, uint64_t seed);

  // Tokens the repetition penalty also applies to.
  void set_prompt(std::span<const int32_t> prompt_ids);
  // Appends an emitted token to the output history (penalties; the next draw position).
  void accept(int32_t id);
  int64_t num_output_tokens() const { return num_output_tokens_; }
  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }

  // Samples output position num_output_tokens() from one row of logits (vocab-sized).
  SampledToken sample(std::span<const float> logits) const { return sample_at(logits, num_output_tokens_); }
  // The same with an explicit draw position (speculative verification rows, tests).
  SampledToken sample_at(std::span<const float> logits, uint64_t position) const;

  // Step 1 alone (bias and penalties); also the GPU backend's tests.
  std::vector<float> processed_logits(std::span<const float> logits) const;
  // Step 2: the distribution a draw at this state samples from (processed: from step 1).
  TokenDistribution distribution(const std::vector<float>& processed) const;
  // The draw rule's parameters of this request at output `position` (not greedy).
  kernels::DrawParams draw_params(uint64_t position) const;
  // The emitted token `id` with its logprobs (of the processed logits) when params ask.
  SampledToken describe(const std::vector<float>& processed, int32_t id) const;

  // Threads for a row's pass over the vocabulary (null: the calling thread); same results
  // either way. Copies share it; it must outlive them. A pool called from inside one of its
  // own jobs runs the call inline (runtime/thread_pool.h), so rows drawn side by side on it
  // stay correct.
  void set_parallel(const kernels::ParallelFor* pool) { parallel_ = pool; }

 private:

  SamplingParams params_;
  uint64_t seed_;
  std::vector<int32_t> prompt_ids_;                    // sorted, unique
  std::unordered_map<int32_t, int32_t> output_counts_;  // token -> times emitted
  std::optional<grammar::ConstraintState> constraint_;  // params.constraint's progress
  int64_t num_output_tokens_ = 0;
  const kernels::ParallelFor* parallel_ = nullptr;  // set_parallel
};

}  // namespace deltaserve::runtime
