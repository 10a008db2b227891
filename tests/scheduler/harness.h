// Drives a Scheduler step by step against the FakeRunner, checking after every step what
// must always hold: the token budget, decode rows before prefill chunks, chunk sizes,
// the running bound, the pools' integrity and the fake's view of slots and KV blocks.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"
#include "tests/scheduler/fake_runner.h"

namespace deltaserve::scheduler::testing {

// Everything a request's sink received.
struct Received {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::None;
  std::string error;
  int num_events = 0;
  int num_events_after_finish = 0;
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;
  int32_t num_cached_prompt_tokens = -1;  // prompt tokens the prefix cache supplied
  bool finished() const { return finish != FinishReason::None; }
};

inline void record(Received& r, const RequestEvent& e) {
  if (r.finished()) ++r.num_events_after_finish;
  ++r.num_events;
  r.tokens.insert(r.tokens.end(), e.tokens.begin(), e.tokens.end());
  r.logprobs.insert(r.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  r.finish = e.finish;
  r.error = e.error;
  r.num_prompt_tokens = e.num_prompt_tokens;
  r.num_generated_tokens = e.num_generated_tokens;
  r.num_cached_prompt_tokens = e.num_cached_prompt_tokens;
}

struct RecordingObserver : EngineObserver {
  void on_inter_token(RequestId, double gap_ms) override { gaps_ms.push_back(gap_ms); }
  void on_request_finished(const RequestReport& r) override { reports.push_back(r); }
  void on_engine_error(const std::string& message) override { errors.push_back(message); }
  std::vector<double> gaps_ms;
  std::vector<RequestReport> reports;
  std::vector<std::string> errors;
};

inline runtime::RunnerLimits make_limits(int32_t num_slots, int32_t block_tokens, int32_t num_blocks,
                                int32_t max_context = 0) {
  runtime::RunnerLimits limits;
  limits.cache.num_state_slots = num_slots;
  limits.cache.kv_block_tokens = block_tokens;
  limits.cache.num_kv_blocks = num_blocks;
  limits.max_context_tokens = max_context;
  return limits;
}

// A prompt of `length` ids in [1, num_vocab), different per `seed`.
inline RequestSpec make_spec(int32_t length, int32_t max_tokens, uint32_t seed,
                             int32_t num_vocab = 1000) {
  RequestSpec spec;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(1, num_vocab - 1);
  for (int32_t i = 0; i < length; ++i) spec.prompt_tokens.push_back(id(rng));
  spec.max_tokens = max_tokens;
  spec.sampling.temperature = 0.0f;
  return spec;
}

class Harness {
 public:
  Harness(runtime::RunnerLimits limits, SchedulerConfig config)
      : runner(limits),
        config(resolve_config(config, runner.limits())),
        scheduler(this->config, runner.limits(), &observer, [this] { return now; }) {}

  RequestId add(RequestSpec spec) {
    const RequestId id = next_id_++;
    scheduler.add(id, std::move(spec), [this, id](const RequestEvent& e) { record(received[id], e); }, now);
    return id;
  }

  Expected expected(const RequestSpec& spec) const {
    return expected_output(spec, config.max_context_tokens, runner.next_token);
  }

  // One plan -> execute -> commit; returns the plan's rows as the fake saw them.
  std::vector<PlannedRow> step() {
    const runtime::StepPlan plan = scheduler.plan();
    check_plan(plan);
    runtime::StepOutput out;
    out.sequences.resize(plan.sequences.size());
    if (!plan.empty()) runner.execute(plan, out);
    now += std::chrono::milliseconds(1);  // each step takes 1 ms of injected time
    last_report = scheduler.commit(plan, out);
    std::string why;
    EXPECT_TRUE(scheduler.check_integrity(&why)) << why;
    EXPECT_TRUE(runner.violations().empty()) << runner.violations().front();
    return plan.empty() ? std::vector<PlannedRow>{} : runner.steps.back();
  }

  // Steps until nothing is queued or running; returns the number of steps.
  int run_until_idle(int max_steps = 100000) {
    int num_steps = 0;
    while (!scheduler.idle() && num_steps < max_steps) {
      step();
      ++num_steps;
    }
    EXPECT_TRUE(scheduler.idle()) << "not idle after " << max_steps << " steps";
    return num_steps;
  }

  void expect_all_free() const {
    EXPECT_EQ(scheduler.slots().num_used(), 0);
    EXPECT_EQ(scheduler.blocks().num_used(), 0);
    std::string why;
    EXPECT_TRUE(scheduler.check_integrity(&why)) << why;
  }

  FakeRunner runner;
  const SchedulerConfig config;
  RecordingObserver observer;
  TimePoint now{};
  Scheduler scheduler;
  std::map<RequestId, Received> received;
  StepReport last_report;

 private:
  void check_plan(const runtime::StepPlan& plan) const {
    EXPECT_LE(plan.num_rows(), config.max_num_batched_tokens);
    EXPECT_LE(static_cast<int32_t>(plan.sequences.size()), config.max_num_seqs);
    bool seen_prefill = false;
    for (const runtime::SequencePlan& p : plan.sequences) {
      if (p.is_decode) {
        EXPECT_FALSE(seen_prefill) << "decode row after a prefill chunk";
        EXPECT_EQ(p.tokens.size(), 1u);
      } else {
        seen_prefill = true;
        EXPECT_LE(static_cast<int32_t>(p.tokens.size()), config.max_prefill_chunk_tokens);
      }
    }
  }

  RequestId next_id_ = 1;
};

}  // namespace deltaserve::scheduler::testing
