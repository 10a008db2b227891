// The real ModelRunner: executes the scheduler's StepPlan on a runtime::Backend and picks
// each sampled sequence's next token with the CPU reference sampler. Owned by the daemon,
// called on the engine thread only.
#pragma once

#include <memory>
#include <random>
#include <unordered_map>

#include "runtime/backend.h"
#include "runtime/sampler.h"
#include "scheduler/model_runner.h"

namespace deltaserve::scheduler {

class BackendRunner final : public ModelRunner {
 public:
  // The backend must outlive the runner. max_context_tokens 0 = the model's trained length.
  BackendRunner(runtime::Backend& backend, int32_t max_context_tokens);

  RunnerLimits limits() const override;
  void execute(const StepPlan& plan, StepOutput& out) override;

 private:
  // The request's sampler, in step with its history (rebuilt after preemption or a gap).
  runtime::Sampler& sampler_for(const SequencePlan& seq);

  runtime::Backend& backend_;
  int32_t max_context_tokens_;
  runtime::ForwardOutput forward_;  // reused every step
  // Samplers of the requests in the last plan; others are dropped (rebuilt on return).
  std::unordered_map<RequestId, std::unique_ptr<runtime::Sampler>> samplers_;
  uint64_t seed_salt_;  // unseeded requests: seed = salt ^ request id
};

}  // namespace deltaserve::scheduler
