// The two types a request's results carry across every layer: its id, and an emitted
// token's log-probability with its top alternatives. Defined here, at the bottom, so the
// runtime's step driver (runtime/model_runner.h) and the scheduler's request contract
// (scheduler/request.h) name the same types without the runtime knowing the scheduler.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace deltaserve::runtime {

using RequestId = uint64_t;

// One emitted token's logprob (natural log, after the request's sampling transforms) and,
// when top_logprobs was asked, its most likely alternatives as (token id, logprob).
struct OutputLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

}  // namespace deltaserve::runtime
