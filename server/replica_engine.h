// --split replicas: several engines, each holding the whole model on its own device, behind
// one ServingEngine, so the HTTP layer, the tokenizer and the drain sequence stay as they are
// for one engine. Each submit goes to the engine choose_replica() picks (prefix affinity, then
// load: server/replica_routing.h); everything else fans out to every engine.
//
// Request ids: the engines number their requests independently, so the router's id is
// local * num_engines + engine (unique, and cancel() finds the engine from it); events reach
// the caller's sink with that id. The load it routes by is its own count of requests in
// flight per engine (raised at submit, lowered by the final event), exact at once, where the
// engines' stats() lag by a step.
// Thread-safety: every method may be called from any thread; only wait_idle and
// reset_prefix_cache block (as on one engine). The engines must outlive the router.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "server/replica_routing.h"
#include "server/serving_engine.h"

namespace deltaserve::server {

// Told of every routing decision (ServerMetrics counts them). Called from submit()'s thread.
class RouteObserver {
 public:
  virtual ~RouteObserver() = default;
  virtual void on_route(int32_t engine, RouteReason reason) = 0;
};

class ReplicaEngine final : public ServingEngine {
 public:
  struct Replica {
    ServingEngine* engine = nullptr;
    int32_t num_slots = 0;  // its max_streams
  };
  // At least one replica; `observer` may be null.
  ReplicaEngine(std::vector<Replica> replicas, RoutePolicy policy, RouteObserver* observer);

  scheduler::SubmitResult submit(scheduler::RequestSpec spec, scheduler::EventSink sink) override;
  void cancel(scheduler::RequestId id) override;
  scheduler::EngineStats stats() const override;  // the sum over the engines
  bool ready() const override;                    // every engine is ready
  void begin_drain() override;
  void cancel_all() override;
  bool wait_idle(std::chrono::milliseconds timeout) override;
  bool reset_prefix_cache(std::chrono::milliseconds timeout) override;
  int32_t cached_prefix_tokens(std::span<const uint64_t> prefix_hashes) const override;
  std::vector<scheduler::EngineStats> replica_stats() const override;

  int32_t num_engines() const { return static_cast<int32_t>(replicas_.size()); }
  // Requests routed to `engine` and not finished yet.
  int32_t num_in_flight(int32_t engine) const { return in_flight_[static_cast<size_t>(engine)].load(); }

 private:
  // Submits to `engine`, counting it in flight until its final event.
  scheduler::SubmitResult submit_to(int32_t engine, scheduler::RequestSpec spec, scheduler::EventSink sink);

  std::vector<Replica> replicas_;
  RoutePolicy policy_;
  RouteObserver* observer_;
  // Per engine; shared with the sinks, which may outlive the router (an engine that stops
  // after it still ends its requests).
  std::shared_ptr<std::atomic<int32_t>[]> in_flight_;
  std::mutex route_mutex_;  // one choice at a time: the counts it reads are the ones it raises
  int32_t next_tie_ = 0;    // route_mutex_; where the round robin of ties starts
};

// Adds every field of `add` into `sum` (flags: any engine's).
void add_engine_stats(scheduler::EngineStats& sum, const scheduler::EngineStats& add);

}  // namespace deltaserve::server
