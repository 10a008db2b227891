// The real ModelRunner: executes the scheduler's StepPlan on a runtime::Backend, picks each
// sampled sequence's tokens with the CPU reference sampler, and verifies MTP drafts.
// Owned by the daemon, called on the engine thread only.
//
// Verification is exact for every request: row r of a verify step is sampled exactly as a
// plain decode step at that output position would be (same processed logits, same seeded
// draw), and the drafts are accepted while they equal what was sampled. So the output with
// speculation is token-for-token the output without it, for greedy and seeded sampling alike.
#pragma once

#include <memory>
#include <random>
#include <unordered_map>

#include "runtime/backend.h"
#include "runtime/sampler.h"
#include "scheduler/model_runner.h"
#include "scheduler/mtp_drafter.h"

namespace deltaserve::scheduler {

class BackendRunner final : public ModelRunner {
 public:
  // The backend must outlive the runner. max_context_tokens 0 = the model's trained length.
  // max_draft_depth > 0 enables MTP drafting (the model needs an MTP head and the backend
  // max_verify_rows >= 1 + max_draft_depth; throws std::invalid_argument otherwise).
  BackendRunner(runtime::Backend& backend, int32_t max_context_tokens, int32_t max_draft_depth = 0);

  RunnerLimits limits() const override;
  void execute(const StepPlan& plan, StepOutput& out) override;
  // The backend's memory_stats(), as the engine publishes it for /metrics.
  RunnerStats stats() const override;

 private:
  // The request's sampler, in step with its history (rebuilt after preemption or a gap).
  runtime::Sampler& sampler_for(const SequencePlan& seq);
  // Samples row after row of a sequence's logits until one differs from its draft.
  std::vector<int32_t> sample_and_verify(const SequencePlan& seq, int64_t first_row,
                                         const std::vector<int32_t>& drafts, SequenceOutput& result);

  runtime::Backend& backend_;
  int32_t max_context_tokens_;
  int32_t max_draft_depth_;
  std::unique_ptr<MtpDrafter> drafter_;  // null without speculation
  runtime::ForwardOutput forward_;       // reused every step
  // Samplers of the requests in the last plan; others are dropped (rebuilt on return).
  std::unordered_map<RequestId, std::unique_ptr<runtime::Sampler>> samplers_;
  uint64_t seed_salt_;  // unseeded requests: seed = salt ^ request id
};

}  // namespace deltaserve::scheduler
