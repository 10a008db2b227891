// The loop every real-stack test runs (Engine + BackendRunner + a real backend): submit all
// requests at once, collect each one's events, wait for every finish and for the engine to go
// idle, then check that the engine is whole again (integrity check, every state slot and KV
// block back). The tests build their own stacks; this is what they share.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/engine.h"
#include "tests/scheduler/harness.h"

namespace deltaserve::scheduler::testing {

// What a request's sink received (harness.h's record of every event).
using Outcome = Received;

// Drafted and accepted drafts by draft position, summed over the engine's steps.
class DraftCounter : public EngineObserver {
 public:
  void on_drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) override {
    std::lock_guard<std::mutex> lock(mutex_);
    drafted_[position] += num_drafted;
    accepted_[position] += num_accepted;
  }
  std::pair<std::map<int32_t, int64_t>, std::map<int32_t, int64_t>> counts() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {drafted_, accepted_};
  }

  // Read directly only once the engine has stopped.
  std::map<int32_t, int64_t> drafted_, accepted_;

 protected:
  mutable std::mutex mutex_;
};

// The speculation tests' prompts: code and prose openings that the embedded model continues
// predictably enough for drafts to be accepted.
inline constexpr const char* kSpeculationPrompts[8] = {
    "def fibonacci(n):\n", "import os\nimport sys\n\ndef main():\n", "class Stack:\n    def __init__(self):\n",
    "The quick brown fox", "for i in range(10):\n    ", "It was a dark and stormy night;", "    return self._",
    "# Copyright (C) 2001 Python Software Foundation\n"};

// How long a test waits for its requests: generous, because the sanitizer builds run these
// engines several times slower on a loaded 2-core machine; past it the test fails (and the
// engine's late events land in state the sinks share, never in a finished test's stack).
inline constexpr std::chrono::seconds kRequestsTimeout{300};

// A runner that forwards to another and, while held, blocks the engine inside execute(): what
// is submitted meanwhile reaches the scheduler in one inbox, as a burst of requests that arrive
// within one step does (the first step of such a burst plans them together).
class HeldRunner : public runtime::ModelRunner {
 public:
  explicit HeldRunner(runtime::ModelRunner& inner) : inner_(inner) {}
  runtime::RunnerLimits limits() const override { return inner_.limits(); }
  runtime::RunnerStats stats() const override { return inner_.stats(); }
  void reserve_checkpoints(int32_t num_device, int32_t num_host) override { inner_.reserve_checkpoints(num_device, num_host); }
  void execute(const runtime::StepPlan& plan, runtime::StepOutput& out) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      inside_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return !held_; });
    }
    inner_.execute(plan, out);
  }
  void hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = true;
    inside_ = false;
  }
  // Waits until the engine is blocked inside a step (held).
  bool wait_inside() {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [this] { return inside_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = false;
    changed_.notify_all();
  }

 private:
  runtime::ModelRunner& inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  bool inside_ = false;
};

// Outcomes in the order of `specs`. Every request must be accepted and finish within
// kRequestsTimeout. after_submit (if any) runs once all are submitted, before the wait.
inline std::vector<Outcome> run_to_completion(Engine& engine, const std::vector<RequestSpec>& specs,
                                              const std::function<void()>& after_submit = {}) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    std::map<RequestId, Outcome> outcomes;
    size_t num_done = 0;
  };
  const auto shared = std::make_shared<Shared>();
  std::vector<RequestId> ids;
  for (const RequestSpec& spec : specs) {
    const SubmitResult r = engine.submit(spec, [shared](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      record(shared->outcomes[e.id], e);
      if (e.finish != FinishReason::None) {
        ++shared->num_done;
        shared->done.notify_all();
      }
    });
    EXPECT_EQ(r.status, SubmitStatus::Accepted) << r.message;
    ids.push_back(r.id);
  }
  if (after_submit) after_submit();
  {
    std::unique_lock<std::mutex> lock(shared->mutex);
    EXPECT_TRUE(shared->done.wait_for(lock, kRequestsTimeout, [&] { return shared->num_done == specs.size(); }));
  }
  EXPECT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.integrity_error(), "");
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.num_state_slots_used, 0);
  EXPECT_EQ(stats.num_kv_blocks_used, 0);
  std::lock_guard<std::mutex> lock(shared->mutex);
  std::vector<Outcome> result;
  for (const RequestId id : ids) result.push_back(shared->outcomes[id]);
  return result;
}

// One request on a running engine, waited for (kRequestsTimeout); cancelled once it has at
// least cancel_after_tokens tokens (0: never), for the A-B-A orders of the no-poisoning tests.
inline Outcome run_alone(Engine& engine, const RequestSpec& spec, int cancel_after_tokens = 0) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    Outcome o;
  };
  const auto shared = std::make_shared<Shared>();
  const SubmitResult r = engine.submit(spec, [shared, &engine, cancel_after_tokens](const RequestEvent& e) {
    std::lock_guard<std::mutex> lock(shared->mutex);
    record(shared->o, e);
    if (cancel_after_tokens > 0 && static_cast<int>(shared->o.tokens.size()) >= cancel_after_tokens) engine.cancel(e.id);
    if (e.finish != FinishReason::None) shared->done.notify_all();
  });
  EXPECT_EQ(r.status, SubmitStatus::Accepted) << r.message;
  std::unique_lock<std::mutex> lock(shared->mutex);
  EXPECT_TRUE(shared->done.wait_for(lock, kRequestsTimeout, [&] { return shared->o.finish != FinishReason::None; }));
  return shared->o;
}

inline std::vector<std::vector<int32_t>> tokens_of(const std::vector<Outcome>& outcomes) {
  std::vector<std::vector<int32_t>> tokens;
  for (const Outcome& o : outcomes) tokens.push_back(o.tokens);
  return tokens;
}

}  // namespace deltaserve::scheduler::testing
