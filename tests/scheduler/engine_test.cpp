// The threaded engine: submit statuses, the queue bound, cancellation between steps,
// concurrency invariance, runner failures, drain and stop.
#include "scheduler/engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/scheduler/harness.h"

namespace deltaserve::scheduler {
namespace {

using namespace std::chrono_literals;
using testing::FakeRunner;
using testing::make_limits;
using testing::make_spec;
using testing::Received;
using testing::RecordingObserver;

// Sinks run on the engine thread; the test reads under the same mutex.
class Collector {
 public:
  EventSink sink() {
    return [this](const RequestEvent& e) {
      std::lock_guard lock(mutex_);
      testing::record(by_id_[e.id], e);
      cv_.notify_all();
    };
  }
  Received get(RequestId id) {
    std::lock_guard lock(mutex_);
    return by_id_[id];
  }
  // Waits until `id` has received at least `num_tokens` tokens or finished.
  bool wait_tokens(RequestId id, size_t num_tokens) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, 10s, [&] {
      const Received& r = by_id_[id];
      return r.tokens.size() >= num_tokens || r.finished();
    });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<RequestId, Received> by_id_;
};

// Holds the runner inside execute() until released, so the test can act mid-step.
class Gate {
 public:
  void arm() {
    std::lock_guard lock(mutex_);
    armed_ = true;
    inside_ = false;
  }
  void on_execute() {
    std::unique_lock lock(mutex_);
    if (!armed_) return;
    inside_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !armed_; });
  }
  bool wait_inside() {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, 10s, [this] { return inside_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool inside_ = false;
};

SchedulerConfig small_config(int32_t max_num_waiting = 64) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 32;
  c.max_prefill_chunk_tokens = 8;
  c.max_num_waiting = max_num_waiting;
  return c;
}

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : runner(make_limits(16, 4, 256)) {
    runner.on_execute = [this](const runtime::StepPlan&) { gate.on_execute(); };
  }
  void TearDown() override {
    EXPECT_TRUE(runner.violations().empty()) << runner.violations().front();
  }
  FakeRunner runner;
  Gate gate;
  Collector collector;
  RecordingObserver observer;
};

TEST_F(EngineTest, NotReadyBeforeStartAndAfterStop) {
  Engine engine(runner, small_config(), &observer);
  EXPECT_FALSE(engine.ready());
  EXPECT_EQ(engine.submit(make_spec(4, 2, 1), collector.sink()).status, SubmitStatus::NotReady);
  EXPECT_TRUE(engine.wait_idle(1ms));
  engine.start();
  EXPECT_TRUE(engine.ready());
  engine.stop();
  EXPECT_FALSE(engine.ready());
  EXPECT_EQ(engine.submit(make_spec(4, 2, 1), collector.sink()).status, SubmitStatus::NotReady);
}

// A request that finishes frees its place for the first waiting one, which the next step
// admits. A client that sends its next request as soon as its stream ends arrives during
// that step; the bound counted the admitted one as still waiting and answered 429 with
// every place taken by running requests and the queue one short of full.
TEST_F(EngineTest, QueueBoundDoesNotCountWaitersAFreedPlaceAdmits) {
  SchedulerConfig config = small_config(/*max_num_waiting=*/1);
  config.max_num_seqs = 1;
  Engine engine(runner, config, &observer);
  engine.start();
  EventSink collect = collector.sink();
  // Holds the step after the first request's last commit: the one that admits the second.
  EventSink arm_on_finish = [&](const RequestEvent& e) {
    collect(e);
    if (e.finish != FinishReason::None) gate.arm();
  };
  const RequestId first = engine.submit(make_spec(4, 2, 1), arm_on_finish).id;
  const RequestId second = engine.submit(make_spec(4, 2, 2), collector.sink()).id;
  ASSERT_NE(first, 0u);
  ASSERT_NE(second, 0u);
  ASSERT_TRUE(gate.wait_inside());
  EXPECT_TRUE(collector.get(first).finished());
  EXPECT_EQ(engine.submit(make_spec(4, 2, 3), collector.sink()).status, SubmitStatus::Accepted);
  EXPECT_EQ(engine.submit(make_spec(4, 2, 4), collector.sink()).status, SubmitStatus::QueueFull);
  gate.release();
  ASSERT_TRUE(engine.wait_idle(10s));
  EXPECT_EQ(collector.get(second).finish, FinishReason::Length);
}

// A cancel the step loop has yet to apply (a stop string matched and the client, told the
// stream ended, sends its next request at once) frees a place: not a 429.
TEST_F(EngineTest, QueueBoundDoesNotCountPlacesAPendingCancelFrees) {
  SchedulerConfig config = small_config(/*max_num_waiting=*/1);
  config.max_num_seqs = 1;
  Engine engine(runner, config, &observer);
  engine.start();
  gate.arm();
  const RequestId first = engine.submit(make_spec(4, 8, 1), collector.sink()).id;
  ASSERT_TRUE(gate.wait_inside());
  ASSERT_EQ(engine.submit(make_spec(4, 2, 2), collector.sink()).status, SubmitStatus::Accepted);
  EXPECT_EQ(engine.submit(make_spec(4, 2, 3), collector.sink()).status, SubmitStatus::QueueFull);
  engine.cancel(first);
  EXPECT_EQ(engine.submit(make_spec(4, 2, 4), collector.sink()).status, SubmitStatus::Accepted);
  gate.release();
  ASSERT_TRUE(engine.wait_idle(10s));
  EXPECT_EQ(collector.get(first).finish, FinishReason::Cancelled);
}

TEST_F(EngineTest, TooLongPromptIsRejectedAtSubmit) {
  SchedulerConfig config = small_config();
  config.max_context_tokens = 64;
  Engine engine(runner, config, &observer);
  engine.start();
  const SubmitResult r = engine.submit(make_spec(64, 2, 1), collector.sink());
  EXPECT_EQ(r.status, SubmitStatus::TooLong);
  EXPECT_FALSE(r.message.empty());
  EXPECT_EQ(engine.submit(make_spec(63, 2, 1), collector.sink()).status, SubmitStatus::Accepted);
  EXPECT_TRUE(engine.wait_idle(10s));
}

TEST_F(EngineTest, QueueBoundAnswersQueueFull) {
  SchedulerConfig config = small_config(/*max_num_waiting=*/2);
  config.max_num_seqs = 1;  // one running place: every later request waits
  Engine engine(runner, config, &observer);
  engine.start();
  gate.arm();
  const RequestId first = engine.submit(make_spec(4, 3, 1), collector.sink()).id;
  ASSERT_TRUE(gate.wait_inside());  // the engine is mid-step; the inbox fills up
  EXPECT_EQ(engine.submit(make_spec(4, 3, 2), collector.sink()).status, SubmitStatus::Accepted);
  EXPECT_EQ(engine.submit(make_spec(4, 3, 3), collector.sink()).status, SubmitStatus::Accepted);
  const SubmitResult full = engine.submit(make_spec(4, 3, 4), collector.sink());
  EXPECT_EQ(full.status, SubmitStatus::QueueFull);
  // The 429 body adds "Retry later." itself (router.cpp): the 429 said it twice.
  EXPECT_EQ(full.message, "too many queued requests (2)");
  EXPECT_EQ(engine.stats().num_waiting, 2);
  gate.release();
  ASSERT_TRUE(engine.wait_idle(10s));
  EXPECT_EQ(collector.get(first).finish, FinishReason::Length);
  EXPECT_EQ(engine.submit(make_spec(4, 3, 5), collector.sink()).status, SubmitStatus::Accepted);
  EXPECT_TRUE(engine.wait_idle(10s));
}

// Requests that arrive together while places are free are not waiting: with 16 places and 2
// waiting allowed, 15 submitted mid-step beside a running one all get places, 2 more wait, and
// only the next is refused. (The bound once counted every submission not yet taken by the
// step loop, so a burst smaller than the free places drew 429s.)
TEST_F(EngineTest, QueueBoundCountsOnlyRequestsBeyondTheFreePlaces) {
  Engine engine(runner, small_config(/*max_num_waiting=*/2), &observer);  // 16 slots
  engine.start();
  gate.arm();
  std::vector<RequestId> ids{engine.submit(make_spec(4, 3, 1), collector.sink()).id};
  ASSERT_TRUE(gate.wait_inside());  // the engine is mid-step; the inbox fills up
  for (int i = 0; i < 17; ++i) {
    const SubmitResult r = engine.submit(make_spec(4, 3, 2 + static_cast<uint32_t>(i)), collector.sink());
    ASSERT_EQ(r.status, SubmitStatus::Accepted) << "submission " << i + 2;
    ids.push_back(r.id);
  }
  EXPECT_EQ(engine.stats().num_waiting, 2);
  EXPECT_EQ(engine.submit(make_spec(4, 3, 99), collector.sink()).status, SubmitStatus::QueueFull);
  gate.release();
  ASSERT_TRUE(engine.wait_idle(10s));
  for (RequestId id : ids) EXPECT_EQ(collector.get(id).finish, FinishReason::Length) << "request " << id;
  EXPECT_EQ(engine.stats().num_waiting, 0);
}

TEST_F(EngineTest, CancelFreesTheSlotBeforeTheNextStep) {
  Engine engine(runner, small_config(), &observer);
  engine.start();
  // The sink (engine thread) arms the gate at the third token: the next step blocks.
  bool armed = false;
  EventSink arm_at_three = [&, inner = collector.sink()](const RequestEvent& e) {
    inner(e);
    if (!armed && collector.get(e.id).tokens.size() >= 3) {
      armed = true;
      gate.arm();
    }
  };
  const RequestId doomed = engine.submit(make_spec(4, 100000, 1), arm_at_three).id;
  ASSERT_TRUE(gate.wait_inside());
  // The engine is blocked inside the step that is not yet recorded: stable.
  const size_t num_steps_seen = runner.steps.size() + 1;
  engine.cancel(doomed);
  const RequestId other = engine.submit(make_spec(4, 3, 2), collector.sink()).id;
  gate.release();
  ASSERT_TRUE(engine.wait_idle(10s));
  EXPECT_EQ(collector.get(doomed).finish, FinishReason::Cancelled);
  EXPECT_EQ(collector.get(other).finish, FinishReason::Length);
  for (size_t s = num_steps_seen; s < runner.steps.size(); ++s) {
    for (const testing::PlannedRow& row : runner.steps[s]) EXPECT_NE(row.id, doomed) << "step " << s;
  }
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.num_state_slots_used, 0);
  EXPECT_EQ(stats.num_kv_blocks_used, 0);
  EXPECT_EQ(stats.num_cancellations, 1u);
  EXPECT_TRUE(engine.integrity_error().empty()) << engine.integrity_error();
}

TEST_F(EngineTest, SixteenConcurrentStreamsMatchEachAlone) {
  std::vector<RequestSpec> specs;
  for (uint32_t i = 0; i < 16; ++i) {
    specs.push_back(make_spec(3 + static_cast<int32_t>(i * 7), 12 + static_cast<int32_t>(i), 500 + i));
  }
  Engine engine(runner, small_config(), &observer);
  engine.start();
  std::vector<std::vector<int32_t>> alone;
  for (const RequestSpec& spec : specs) {
    const RequestId id = engine.submit(spec, collector.sink()).id;
    ASSERT_TRUE(engine.wait_idle(10s));
    alone.push_back(collector.get(id).tokens);
    ASSERT_EQ(alone.back().size(), static_cast<size_t>(spec.max_tokens));
  }
  std::vector<RequestId> ids(specs.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < specs.size(); ++i) {
    clients.emplace_back([&, i] { ids[i] = engine.submit(specs[i], collector.sink()).id; });
  }
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(engine.wait_idle(10s));
  for (size_t i = 0; i < specs.size(); ++i) {
    const Received got = collector.get(ids[i]);
    EXPECT_EQ(got.tokens, alone[i]) << i;
    EXPECT_EQ(got.finish, FinishReason::Length);
    EXPECT_EQ(got.num_events_after_finish, 0);
  }
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_kv_blocks_used, 0);
  EXPECT_GT(stats.num_steps, 0u);
  EXPECT_EQ(observer.reports.size(), 32u);
}

// Every event reaches its sink after the step that produced it is published (stats() and the
// observer's on_step, on_request_finished): a client that reads /metrics after its response's
// last byte finds that step counted. The final event used to go out inside the commit, before
// the step's on_step and publish, so /metrics lagged one step behind a finished response.
TEST_F(EngineTest, EventsGoOutAfterTheirStepIsPublished) {
  struct StepCounter : testing::RecordingObserver {
    void on_step(const StepReport&) override { ++num_steps; }
    uint64_t num_steps = 0;  // engine thread
  };
  struct Seen {
    uint64_t published_steps = 0;
    uint64_t observed_steps = 0;
    size_t executed_steps = 0;
    int32_t num_running = 0;
    size_t num_finished_reports = 0;
    FinishReason finish = FinishReason::None;
  };
  StepCounter counter;
  Engine engine(runner, small_config(), &counter);
  std::vector<Seen> seen;  // written by the sink on the engine thread, read once idle
  EventSink sink = [&](const RequestEvent& e) {
    const EngineStats stats = engine.stats();
    seen.push_back({stats.num_steps, counter.num_steps, runner.steps.size(), stats.num_running, counter.reports.size(), e.finish});
  };
  engine.start();
  ASSERT_EQ(engine.submit(make_spec(12, 5, 1), sink).status, SubmitStatus::Accepted);
  ASSERT_TRUE(engine.wait_idle(10s));
  ASSERT_EQ(seen.size(), 5u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].published_steps, seen[i].executed_steps) << "event " << i;
    EXPECT_EQ(seen[i].observed_steps, seen[i].executed_steps) << "event " << i;
  }
  EXPECT_EQ(seen.back().finish, FinishReason::Length);
  EXPECT_EQ(seen.back().num_running, 0);
  EXPECT_EQ(seen.back().num_finished_reports, 1u);
}

TEST_F(EngineTest, RunnerExceptionEndsThePlanWithErrorAndTheEngineGoesOn) {
  Engine engine(runner, small_config(), &observer);
  runner.throw_next = true;
  engine.start();
  const RequestId failed = engine.submit(make_spec(4, 3, 1), collector.sink()).id;
  ASSERT_TRUE(engine.wait_idle(10s));
  EXPECT_EQ(collector.get(failed).finish, FinishReason::Error);
  EXPECT_NE(collector.get(failed).error.find("scripted failure"), std::string::npos);
  const RequestId next = engine.submit(make_spec(4, 3, 2), collector.sink()).id;
  ASSERT_TRUE(engine.wait_idle(10s));
  EXPECT_EQ(collector.get(next).finish, FinishReason::Length);
  engine.stop();
  ASSERT_EQ(observer.errors.size(), 1u);
  EXPECT_NE(observer.errors[0].find("scripted failure"), std::string::npos);
}

TEST_F(EngineTest, DrainFinishesRunningWorkAndRefusesNewWork) {
  Engine engine(runner, small_config(), &observer);
  engine.start();
  gate.arm();
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 3; ++i) ids.push_back(engine.submit(make_spec(6, 5, i), collector.sink()).id);
  ASSERT_TRUE(gate.wait_inside());
  engine.begin_drain();
  EXPECT_FALSE(engine.ready());
  const SubmitResult refused = engine.submit(make_spec(4, 2, 9), collector.sink());
  EXPECT_EQ(refused.status, SubmitStatus::NotReady);
  EXPECT_FALSE(engine.wait_idle(20ms));  // still mid-step
  gate.release();
  ASSERT_TRUE(engine.wait_idle(10s));
  for (const RequestId id : ids) EXPECT_EQ(collector.get(id).finish, FinishReason::Length);
}

TEST_F(EngineTest, CancelAllAndStopEndEveryRequest) {
  // A context of 128k tokens: these requests cannot finish on their own within the test.
  FakeRunner long_runner(make_limits(4, 4, 1 << 15));
  Engine engine(long_runner, small_config(), &observer);
  engine.start();
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 4; ++i) ids.push_back(engine.submit(make_spec(6, 100000, i), collector.sink()).id);
  ASSERT_TRUE(collector.wait_tokens(ids[0], 2));
  engine.begin_drain();
  engine.cancel_all();
  ASSERT_TRUE(engine.wait_idle(10s));
  for (const RequestId id : ids) EXPECT_EQ(collector.get(id).finish, FinishReason::Cancelled);

  Engine second(long_runner, small_config(), &observer);
  second.start();
  Collector second_collector;  // ids restart at 1 in a new engine
  const RequestId left = second.submit(make_spec(6, 100000, 7), second_collector.sink()).id;
  ASSERT_TRUE(second_collector.wait_tokens(left, 1));
  second.stop();
  EXPECT_EQ(second_collector.get(left).finish, FinishReason::Cancelled);
  EXPECT_EQ(second_collector.get(left).num_events_after_finish, 0);
  EXPECT_TRUE(second.integrity_error().empty());
  EXPECT_TRUE(long_runner.violations().empty());
}

}  // namespace
}  // namespace deltaserve::scheduler
