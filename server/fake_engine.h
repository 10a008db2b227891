// A deterministic stand-in for the engine, for tests and `serve --fake-engine`: it echoes
// the prompt back token by token with a real step loop, real slot / KV-block accounting,
// a bounded waiting queue (QueueFull), a context limit (TooLong), cancellation, drain, and
// the observer callbacks the real engine makes, so every server path runs without a model.
//
// What it emits for a request: the tokens of the last user turn (after the last <|user|>
// marker of FakeTextCodec, up to the next <|im_end|>; the whole prompt when there is no
// marker), in order; then, if an EOS id is among the request's stop ids, it stops there
// (finish Stop; as the scheduler contract says, the stop id itself is neither sent nor
// counted), else it starts the echo over. A stop id met inside the echo also ends with
// Stop; max_tokens ends with Length. Odd steps emit two tokens per sequence (an accepted draft),
// even steps one, so multi-token events are always exercised. A prompt containing the bytes
// "[[fail]]" gets two tokens and then finish Error.
//
// Threads: like scheduler::Engine. One engine thread; every public method is thread-safe;
// sinks and observer callbacks run on the engine thread without the lock held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "server/serving_engine.h"

namespace deltaserve::server {

struct FakeEngineConfig {
  int32_t num_slots = 8;
  int32_t max_waiting = 64;
  int32_t context_tokens = 4096;
  int32_t kv_block_tokens = 16;
  int32_t num_kv_blocks = 2048;
  std::chrono::microseconds step_time{2000};  // sleep per step: the "forward pass"
  std::vector<int32_t> eos_token_ids;         // what "EOS" means for the echo
  int32_t marker_user = -1;                   // start of a user turn (-1 = none)
  int32_t marker_end = -1;                    // end of a turn
};

class FakeEngine final : public ServingEngine {
 public:
  FakeEngine(FakeEngineConfig config, scheduler::EngineObserver* observer);
  ~FakeEngine() override;

  scheduler::SubmitResult submit(scheduler::RequestSpec spec, scheduler::EventSink sink) override;
  void cancel(scheduler::RequestId id) override;
  scheduler::EngineStats stats() const override;
  bool ready() const override;
  void begin_drain() override;
  void cancel_all() override;
  bool wait_idle(std::chrono::milliseconds timeout) override;
  void stop();

  EngineLimits limits() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Sequence {
    scheduler::RequestId id = 0;
    scheduler::RequestSpec spec;
    scheduler::EventSink sink;
    std::vector<int32_t> echo;
    bool fail = false;
    int32_t num_generated = 0;
    int32_t num_blocks = 0;
    Clock::time_point submit_time, scheduled_time, first_token_time, last_token_time;
  };

  void run();
  void admit_locked(std::vector<Sequence*>& admitted);
  void refresh_stats_locked();
  void step();
  // Ends a sequence: frees its blocks and slot, reports it. Called without the lock.
  void finish(Sequence& seq, scheduler::RequestEvent& event, scheduler::FinishReason reason);
  void apply_cancels();
  std::vector<int32_t> echo_of(const std::vector<int32_t>& prompt) const;

  const FakeEngineConfig config_;
  scheduler::EngineObserver* observer_;

  mutable std::mutex mutex_;  // guards everything below (running_: written under it by the
                              // engine thread, which alone may also read it without it)
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<scheduler::RequestId> cancels_;
  bool cancel_all_ = false;
  bool draining_ = false;
  bool stopping_ = false;
  int32_t num_blocks_used_ = 0;
  scheduler::EngineStats stats_;
  scheduler::RequestId next_id_ = 1;
  uint64_t num_steps_ = 0;

  std::thread thread_;
};

}  // namespace deltaserve::server
