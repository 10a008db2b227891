// The CPU reference sampler; the GPU backend mirrors it step for step.
//
// Per row: logits -> + logit_bias -> repetition penalty (prompt and output tokens) ->
// frequency/presence penalties (output tokens) = the "processed" logits. Logprobs are the
// log-softmax of the processed logits: after penalties and bias, before temperature and any
// filtering (vLLM's "processed_logprobs"; OpenAI reports the model's distribution, not the
// truncated sampling one). Then greedy = argmax of the processed logits (lowest id on ties);
// otherwise / temperature -> min-p (relative to the top probability) -> top-k -> top-p
// (smallest set of most likely tokens whose mass reaches top_p, renormalised after top-k) ->
// one draw by inverse CDF over the kept tokens in id order.
//
// Randomness is counter-based: the uniform for output position n of a request is
// Philox4x32-10 keyed by the request's seed with counter n. So the same seed and request give
// the same tokens whatever else shares the batch, in any order, on any backend.
//
// Owner: one Sampler per request, used by one thread at a time; sample()/sample_at() are
// const and may run concurrently with each other but not with accept().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/sampling_params.h"

namespace deltaserve::runtime {

// Philox4x32-10 (Salmon et al., SC'11): 4 x 32 random bits for (key, counter).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter);
// The draw for (seed, position) in [0, 1): the first Philox word / 2^32.
double sampler_uniform(uint64_t seed, uint64_t position);

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

  // Step 1 alone (bias and penalties), for the GPU backend's tests.
  std::vector<float> processed_logits(std::span<const float> logits) const;

 private:
  int32_t draw(const std::vector<float>& processed, uint64_t position) const;

  SamplingParams params_;
  uint64_t seed_;
  std::vector<int32_t> prompt_ids_;                    // sorted, unique
  std::unordered_map<int32_t, int32_t> output_counts_;  // token -> times emitted
  int64_t num_output_tokens_ = 0;
};

// Why a request stops after a token (the scheduler and server act on it; the stop token
// itself is not shown as text).
enum class FinishReason : uint8_t { None, Stop, Length };

struct StopConditions {
  std::vector<int32_t> stop_token_ids;  // EOS ids plus the request's stop_token_ids
  int64_t max_tokens = -1;              // output tokens; < 0 = no limit
};

// After the token `id` was emitted as output number `num_output_tokens` (1-based).
FinishReason check_finish(const StopConditions& stop, int32_t id, int64_t num_output_tokens);

}  // namespace deltaserve::runtime
