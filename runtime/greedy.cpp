#include "runtime/greedy.h"

#include "kernels/sampling/draw_ref.h"

namespace deltaserve::runtime {

int32_t argmax_token(std::span<const float> row) {
  return kernels::argmax_ref(row.data(), static_cast<int64_t>(row.size()));
}

bool only_argmax_needed(const SamplingParams& p) {
  return p.greedy() && !p.logprobs && p.top_logprobs <= 0 && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && !p.constraint;
}

}  // namespace deltaserve::runtime
