// The CPU reference sampler. Every backend's sampled rows are drawn here on the host; a GPU
// backend computes only the greedy argmax on the device, by the same rule (runtime/greedy.h).
//
// Per row: logits -> + logit_bias -> repetition penalty (prompt and output tokens) ->
// frequency/presence penalties (output tokens) -> the constraint's mask (-inf for tokens its
// grammar refuses next; params.constraint) = the "processed" logits. Logprobs are the
// log-softmax of the processed logits: after penalties and bias, before temperature and any
// filtering (vLLM's "processed_logprobs"; OpenAI reports the model's distribution, not the
// truncated sampling one). Then greedy = argmax of the processed logits (runtime/greedy.h:
// lowest id on ties, NaN never wins); otherwise / temperature -> min-p (relative to the top
// probability) -> top-k -> top-p (smallest set of most likely tokens whose mass reaches top_p
// of the mass left after top-k, that mass summed in id order) -> one draw by inverse CDF over
// the kept tokens in id order. Each step keeps a most-likely prefix of the tokens, so top-k
// selects before any exp and top-p sorts only the tokens that can be in its set: a row costs
// one pass over the vocabulary, not a sort of it (bench/sampler_bench.cpp).
//
// Randomness is counter-based: the uniform for output position n of a request is
// Philox4x32-10 keyed by the request's seed with counter (n, stream). So the same seed and
// request give the same tokens whatever else shares the batch, in any order, on any backend.
// Speculative sampling (runtime/draft_verifier.h) draws its draft, acceptance and token
// uniforms from separate streams of the same key, so they are independent of each other.
//
// The steps split into processed_logits() -> distribution() (the final probability vector
// a draw samples from) -> draw_token(), so draft verification can compare two distributions
// built by exactly the code that samples.
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
// The draw for (seed, position, stream) in [0, 1): the first Philox word of counter
// (position, stream) / 2^32. Stream Token is the counter (position, 0).
double sampler_uniform(uint64_t seed, uint64_t position, DrawStream stream = DrawStream::Token);

// What one draw samples from, over the whole vocabulary: weights exp(l / T - max) of the
// tokens kept by min-p, top-k and top-p, exactly 0 elsewhere; greedy is one-hot on the argmax.
struct TokenDistribution {
  std::vector<double> weights;  // [num_vocab], unnormalised
  double total = 0;             // sum of weights, accumulated in id order (> 0)
  double probability(int32_t id) const { return weights[static_cast<size_t>(id)] / total; }
  bool empty() const { return weights.empty(); }
};
// Inverse CDF in id order: the first id whose running weight exceeds u * total (u in [0, 1)).
int32_t draw_token(const TokenDistribution& dist, double u);

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
