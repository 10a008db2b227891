// The greedy rule shared by every host path (Sampler, backends' argmax_ids, the MTP drafter)
// and mirrored by kernels/sampling/sampling_gpu.h's argmax_gpu: the id of the largest value, the
// lowest id among equal values, NaN never wins; a row with no non-NaN value (or no value)
// gives 0. -inf is an ordinary value (an all -inf row gives 0 by the tie rule).
//
// only_argmax_needed(): a request whose tokens are exactly argmax_token of the raw logits rows
// and that needs nothing else from them (greedy; no bias, no penalty, no logprobs): a backend
// may compute the ids on its device and never copy those logits (SequenceStep::logits_to_host).
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/sampling_params.h"

namespace deltaserve::runtime {

// kernels/sampling/draw_ref.h's argmax_ref, the one host implementation of the rule.
int32_t argmax_token(std::span<const float> row);
inline int32_t argmax_token(const float* row, int64_t n) {
  return argmax_token(std::span<const float>(row, static_cast<size_t>(n)));
}

// Anything that can move the processed argmax (bias, any non-neutral penalty, a constraint's
// mask: the device argmax must never bypass it) or that needs
// the logits themselves (logprobs) disqualifies.
bool only_argmax_needed(const SamplingParams& params);

}  // namespace deltaserve::runtime
