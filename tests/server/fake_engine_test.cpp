// The fake engine behaves like the real one at the contract level: events end with exactly
// one finish, cancel frees the slot and blocks, the queue bound answers QueueFull.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/fake_engine.h"
#include "server/fake_text_codec.h"

namespace deltaserve::server {
namespace {

using scheduler::FinishReason;

struct Collector {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::None;
  int num_finishes = 0;

  scheduler::EventSink sink() {
    return [this](const scheduler::RequestEvent& e) {
      std::lock_guard lock(mutex);
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::None) {
        finish = e.finish;
        ++num_finishes;
        cv.notify_all();
      }
    };
  }
  // Fails (instead of hanging the suite) when the final event never comes.
  void wait() {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [this] { return num_finishes > 0; }));
  }
};

FakeEngineConfig config() {
  FakeEngineConfig c;
  c.num_slots = 2;
  c.max_waiting = 1;
  c.context_tokens = 64;
  c.num_kv_blocks = 8;
  c.step_time = std::chrono::microseconds(200);
  c.eos_token_ids = {FakeTextCodec::kImEnd};
  c.marker_user = FakeTextCodec::kUser;
  c.marker_end = FakeTextCodec::kImEnd;
  return c;
}

scheduler::RequestSpec spec(const std::string& text, int32_t max_tokens) {
  scheduler::RequestSpec s;
  s.prompt_tokens = FakeTextCodec().encode(text, false);
  s.max_tokens = max_tokens;
  s.stop_token_ids = {FakeTextCodec::kImEnd};
  return s;
}

TEST(FakeEngine, EchoesTheLastUserTurnThenStops) {
  FakeEngine engine(config(), nullptr);
  Collector c;
  ASSERT_EQ(engine.submit(spec("<|im_start|>system\nx<|im_end|><|user|>hello<|im_end|>", 32), c.sink()).status,
            scheduler::SubmitStatus::Accepted);
  c.wait();
  EXPECT_EQ(c.finish, FinishReason::Stop);
  EXPECT_EQ(FakeTextCodec().decode(c.tokens, true), "hello");
  EXPECT_TRUE(engine.wait_idle(std::chrono::seconds(5)));
  EXPECT_EQ(engine.stats().num_kv_blocks_used, 0);
}

TEST(FakeEngine, LengthCancelQueueFullAndDrain) {
  // Slow steps: the "long" requests (capped by the 64-token context) must still be running
  // when the test looks, even on a heavily loaded machine.
  FakeEngineConfig slow = config();
  slow.step_time = std::chrono::milliseconds(100);
  FakeEngine engine(slow, nullptr);
  Collector a, b, c, d;
  engine.submit(spec("abcdefgh", 3), a.sink());
  a.wait();
  EXPECT_EQ(a.finish, FinishReason::Length);
  EXPECT_EQ(a.tokens.size(), 3u);
  // The finish event reaches the sink before the engine has retired the request.
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(60)));
  ASSERT_EQ(engine.stats().num_running, 0);

  // Two long requests fill both slots, a third waits, a fourth finds the queue full.
  scheduler::RequestSpec long_spec = spec("abcdefgh", 1000);
  long_spec.stop_token_ids.clear();
  auto wait_running = [&](int32_t n) {
    // A deadline, not an iteration count: on a loaded machine each sleep can last much longer.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (engine.stats().num_running < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(engine.stats().num_running, n);
  };
  Collector e;
  const scheduler::SubmitResult rb = engine.submit(long_spec, b.sink());
  ASSERT_EQ(rb.status, scheduler::SubmitStatus::Accepted);
  const auto id_b = rb.id;
  wait_running(1);
  const scheduler::SubmitResult rc = engine.submit(long_spec, c.sink());
  ASSERT_EQ(rc.status, scheduler::SubmitStatus::Accepted);
  const auto id_c = rc.id;
  wait_running(2);
  const scheduler::SubmitResult rd = engine.submit(long_spec, d.sink());
  ASSERT_EQ(rd.status, scheduler::SubmitStatus::Accepted);
  const auto id_d = rd.id;
  EXPECT_EQ(engine.submit(long_spec, e.sink()).status, scheduler::SubmitStatus::QueueFull);
  engine.cancel(id_b);
  engine.cancel(id_c);
  engine.cancel(id_d);
  b.wait();
  c.wait();
  d.wait();
  EXPECT_EQ(b.finish, FinishReason::Cancelled);
  EXPECT_EQ(b.num_finishes, 1);
  EXPECT_TRUE(engine.wait_idle(std::chrono::seconds(5)));
  const scheduler::EngineStats s = engine.stats();
  EXPECT_EQ(s.num_kv_blocks_used, 0);
  EXPECT_EQ(s.num_state_slots_used, 0);
  EXPECT_EQ(s.num_cancellations, 3u);

  EXPECT_EQ(engine.submit(spec(std::string(80, 'x'), 1), d.sink()).status, scheduler::SubmitStatus::TooLong);
  engine.begin_drain();
  EXPECT_EQ(engine.submit(spec("a", 1), d.sink()).status, scheduler::SubmitStatus::NotReady);
  EXPECT_FALSE(engine.ready());
}

}  // namespace
}  // namespace deltaserve::server
