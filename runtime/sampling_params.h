// What a request asks of the sampler (OpenAI fields after validation in server/).
// The CPU sampler (runtime/sampler.h) is the reference; the GPU backend mirrors it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace deltaserve::runtime {

namespace grammar {
class Constraint;
}

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; applied to prompt and output tokens
  float presence_penalty = 0.0f;    // output tokens only (OpenAI semantics)
  float frequency_penalty = 0.0f;   // output tokens only
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;  // same seed + same request -> same output, whatever the batch
  bool logprobs = false;
  int32_t top_logprobs = 0;  // 0..20 alternatives per emitted token
  // Constrained decoding (runtime/grammar/constraint.h): every row's disallowed tokens get
  // -inf after bias and penalties, so greedy, sampling, logprobs and draft verification all
  // see only what the grammar allows. Null: free output (costs nothing). Shared, immutable.
  std::shared_ptr<const grammar::Constraint> constraint;
  // Reasoning budget (tokens; -1 = none): the constraint's free phase (the open <think> block)
  // ends after this many tokens with its close sequence forced. It acts through the constraint
  // (runtime/grammar/constraint.h), so a budgeted request must carry one with a close sequence
  // (server/output_constraint.cpp builds it); that also sends it down the constrained paths
  // (host-side masking, constrained drafting) where every draft is checked against it.
  int32_t thinking_budget = -1;

  bool greedy() const { return temperature <= 0.0f; }
};

}  // namespace deltaserve::runtime
