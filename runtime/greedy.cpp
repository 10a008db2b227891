#include "runtime/greedy.h"

namespace deltaserve::runtime {

int32_t argmax_token(std::span<const float> row) {
  int32_t best = -1;
  float best_value = 0.0f;
  for (size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (v != v) continue;  // NaN never wins
    if (best < 0 || v > best_value) {  // strict: the lowest id keeps a tie
      best = static_cast<int32_t>(i);
      best_value = v;
    }
  }
  return best < 0 ? 0 : best;
}

bool only_argmax_needed(const SamplingParams& p) {
  return p.greedy() && !p.logprobs && p.top_logprobs <= 0 && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && !p.constraint;
}

}  // namespace deltaserve::runtime
