// What the daemon needs from an engine beyond submit/cancel: capacity stats for /metrics,
// readiness for /ready, and the drain sequence for SIGTERM. scheduler::Engine has exactly
// these calls; EngineAdapter forwards to it, FakeEngine implements them for tests.
// Every method may be called from any thread; only wait_idle blocks (by design).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "scheduler/engine_stats.h"
#include "scheduler/request.h"

namespace deltaserve::server {

class ServingEngine : public scheduler::RequestQueue {
 public:
  virtual scheduler::EngineStats stats() const = 0;
  virtual bool ready() const = 0;
  virtual void begin_drain() = 0;  // submit() answers NotReady from now on
  virtual void cancel_all() = 0;   // every queued/running request ends with Cancelled
  virtual bool wait_idle(std::chrono::milliseconds timeout) = 0;  // false on timeout
  // Drops every cached prefix (POST /v1/cache/reset); false on timeout. No cache: true.
  virtual bool reset_prefix_cache(std::chrono::milliseconds timeout) {
    (void)timeout;
    return true;
  }
  // How many leading tokens of a prompt its prefix cache could resume from, given the prompt's
  // scheduler::prefix_hashes(); approximate, for routing only. No cache: 0.
  virtual int32_t cached_prefix_tokens(std::span<const uint64_t> prefix_hashes) const {
    (void)prefix_hashes;
    return 0;
  }
  // Several engines behind one (--split replicas): each one's stats, in device order (their
  // sum is stats()). One engine: empty.
  virtual std::vector<scheduler::EngineStats> replica_stats() const { return {}; }
};

// The limits the daemon logs at start and sizes its per-slot metrics by.
struct EngineLimits {
  int32_t max_streams = 0;         // sequences running at once (state slots)
  int32_t max_waiting = 0;         // queued requests before 429
  int32_t context_tokens = 0;      // prompt + generated, per sequence
  int32_t kv_block_tokens = 0;
  int32_t num_kv_blocks = 0;
  int64_t kv_bytes = 0;            // memory of the paged KV cache
  int64_t state_bytes = 0;         // memory of the recurrent-state slots (with rings)
  int32_t max_draft_depth = 0;
  std::string device;              // "cpu", "cuda:0", "fake"; replicas: "cpu:0,cpu:1"
  int32_t num_engines = 1;         // --split replicas: engines behind the router (the counts above are their sums)
};

// Forwards to any engine with scheduler::Engine's method set.
template <class Engine>
class EngineAdapter final : public ServingEngine {
 public:
  explicit EngineAdapter(Engine& engine) : engine_(engine) {}
  scheduler::SubmitResult submit(scheduler::RequestSpec spec, scheduler::EventSink sink) override {
    return engine_.submit(std::move(spec), std::move(sink));
  }
  void cancel(scheduler::RequestId id) override { engine_.cancel(id); }
  scheduler::EngineStats stats() const override { return engine_.stats(); }
  bool ready() const override { return engine_.ready(); }
  void begin_drain() override { engine_.begin_drain(); }
  void cancel_all() override { engine_.cancel_all(); }
  bool wait_idle(std::chrono::milliseconds timeout) override { return engine_.wait_idle(timeout); }
  bool reset_prefix_cache(std::chrono::milliseconds timeout) override { return engine_.reset_prefix_cache(timeout); }
  int32_t cached_prefix_tokens(std::span<const uint64_t> prefix_hashes) const override {
    return engine_.cached_prefix_tokens(prefix_hashes);
  }

 private:
  Engine& engine_;
};

}  // namespace deltaserve::server
