#include "runtime/model_runner.h"

namespace deltaserve::runtime {

int64_t StepPlan::num_rows() const {
  int64_t num = 0;
  for (const SequencePlan& s : sequences) num += static_cast<int64_t>(s.tokens.size()) + s.draft_depth;
  return num;
}

BatchPlan to_batch_plan(const StepPlan& plan) {
  BatchPlan batch;
  batch.sequences.reserve(plan.sequences.size());
  for (const SequencePlan& s : plan.sequences) {
    SequenceStep& step = batch.sequences.emplace_back();
    step.slot = s.slot;
    step.num_cached_tokens = s.num_cached_tokens;
    step.tokens.assign(s.tokens.begin(), s.tokens.end());
    step.kv_blocks.assign(s.kv_blocks.begin(), s.kv_blocks.end());
    step.num_logits = s.sample ? 1 + s.draft_depth : 0;
  }
  return batch;
}

}  // namespace deltaserve::runtime
