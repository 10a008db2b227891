#include "scheduler/backend_runner.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace deltaserve::scheduler {

BackendRunner::BackendRunner(runtime::Backend& backend, int32_t max_context_tokens)
    : backend_(backend), max_context_tokens_(max_context_tokens), seed_salt_(std::random_device{}()) {
  seed_salt_ = (seed_salt_ << 32) ^ std::random_device{}();
}

RunnerLimits BackendRunner::limits() const {
  RunnerLimits limits;
  limits.cache = backend_.cache_config();
  const int64_t trained = backend_.config().context_length;
  limits.max_context_tokens = max_context_tokens_ > 0 ? max_context_tokens_ : static_cast<int32_t>(std::min<int64_t>(trained, INT32_MAX));
  limits.num_vocab = static_cast<int32_t>(backend_.config().num_vocab);
  limits.max_draft_depth = 0;
  return limits;
}

runtime::Sampler& BackendRunner::sampler_for(const SequencePlan& seq) {
  auto it = samplers_.find(seq.id);
  if (it != samplers_.end() && it->second->num_output_tokens() == seq.output_index) return *it->second;
  const runtime::SamplingParams& params = *seq.sampling;
  const uint64_t seed = params.seed.value_or(seed_salt_ ^ seq.id);
  auto sampler = std::make_unique<runtime::Sampler>(params, seed);
  const size_t num_prompt = static_cast<size_t>(seq.num_prompt_tokens);
  sampler->set_prompt(seq.history.subspan(0, std::min(num_prompt, seq.history.size())));
  for (size_t i = num_prompt; i < seq.history.size(); ++i) sampler->accept(seq.history[i]);
  if (sampler->num_output_tokens() != seq.output_index)
    throw std::logic_error("runner: history holds " + std::to_string(sampler->num_output_tokens()) +
                           " output tokens but the plan asks for output " + std::to_string(seq.output_index));
  runtime::Sampler& ref = *sampler;
  samplers_[seq.id] = std::move(sampler);
  return ref;
}

void BackendRunner::execute(const StepPlan& plan, StepOutput& out) {
  const runtime::BatchPlan batch = to_batch_plan(plan);
  backend_.forward(batch, forward_);

  std::unordered_set<RequestId> live;
  int64_t logit_row = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const SequencePlan& seq = plan.sequences[i];
    live.insert(seq.id);
    if (!seq.sample) continue;
    runtime::Sampler& sampler = sampler_for(seq);
    const std::span<const float> logits(forward_.row_logits(logit_row), static_cast<size_t>(forward_.num_vocab));
    logit_row += batch.sequences[i].num_logits;
    const runtime::SampledToken picked = sampler.sample(logits);
    sampler.accept(picked.id);
    SequenceOutput& result = out.sequences[i];
    result.tokens.push_back(picked.id);
    if (seq.sampling->logprobs || seq.sampling->top_logprobs > 0) {
      TokenLogprob lp;
      lp.token = picked.id;
      lp.logprob = picked.logprob;
      for (const runtime::TokenLogprob& alt : picked.top_logprobs) lp.top.emplace_back(alt.id, alt.logprob);
      result.logprobs.push_back(std::move(lp));
    }
  }
  std::erase_if(samplers_, [&](const auto& entry) { return !live.contains(entry.first); });
}

}  // namespace deltaserve::scheduler
