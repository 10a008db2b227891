// The daemon's metrics: one prometheus-cpp registry (core library only), rendered in the
// text exposition format by our own HTTP server at GET /metrics. Feeds on three sources:
// - the engine, through the EngineObserver callbacks (engine thread; cheap, no blocking);
// - the sessions: error responses, how each response ended, open connections (any I/O thread);
// - the engine's stats snapshot, read at scrape time (running/waiting, KV, slots, memory).
// Derived here: the aggregate generation rate over a sliding window and a per-stream decode
// rate published per slot (bounded cardinality: one series per state slot).
// --split replicas: the deltaserve_* series stay the whole daemon's (every engine's observer
// feeds them; the scrape sums the engines' stats); each engine also gets its own
// deltaserve_engine_* series and vLLM set (engine label), fed by engine_observer(i); the router's
// decisions are deltaserve_router_decisions_total{engine, reason}.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "scheduler/engine_stats.h"
#include "server/metric_set.h"
#include "server/process_metrics.h"
#include "server/replica_engine.h"
#include "server/serving_engine.h"

namespace deltaserve::server {

struct MetricsOptions {
  std::string model_name;
  bool vllm_names = false;     // also export the vllm: set
  double rate_window_s = 10.0; // sliding window of deltaserve_generation_tokens_per_second
  // --split replicas: each engine's device, in engine order (labels of its series). Fewer than
  // two: one engine, observed by the ServerMetrics itself.
  std::vector<std::string> engine_devices;
};

class ServerMetrics final : public scheduler::EngineObserver, public RouteObserver {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServerMetrics(MetricsOptions options);
  ~ServerMetrics() override;  // in metrics.cpp, where EngineTap is complete

  // Once, after the engine is built and before it serves: sizes the per-slot series.
  // per_engine: each replica's limits (replicas only).
  void set_limits(const EngineLimits& limits, std::span<const EngineLimits> per_engine = {});

  // Replicas: the observer to build engine `index` with (its request ids are mapped as
  // ReplicaEngine maps them). One engine: this.
  scheduler::EngineObserver* engine_observer(int32_t index);
  int32_t num_engines() const { return static_cast<int32_t>(std::max<size_t>(1, engines_.size())); }
  // RouteObserver (submit's thread).
  void on_route(int32_t engine, RouteReason reason) override;

  // EngineObserver (engine thread).
  void on_step(const scheduler::StepReport& report) override;
  void on_inter_token(scheduler::RequestId id, double gap_ms) override;
  void on_request_finished(const scheduler::RequestReport& report) override;
  void on_drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) override;
  void on_engine_error(const std::string& message) override;  // logged at error level

  // Sessions (any thread).
  void on_error(const std::string& type);
  void on_response_finished(ResponseEnd end);
  // One HTTP response sent: deltaserve_http_responses_total{route, status}.
  void on_http_response(std::string_view route, int status) { process_->count_response(route, status); }

  // One open HTTP connection, counted for the ticket's own lifetime: an HttpSession holds
  // one as a member, so the count rises once per accepted socket and falls once when the
  // session object dies, whichever path closed it (it cannot drift). Neither copyable nor
  // movable; the ServerMetrics must outlive every ticket. Any thread.
  class ConnectionTicket {
   public:
    explicit ConnectionTicket(std::atomic<int64_t>& count) : count_(count) {
      count_.fetch_add(1, std::memory_order_relaxed);
    }
    ~ConnectionTicket() { count_.fetch_sub(1, std::memory_order_relaxed); }
    ConnectionTicket(const ConnectionTicket&) = delete;
    ConnectionTicket& operator=(const ConnectionTicket&) = delete;

   private:
    std::atomic<int64_t>& count_;
  };
  ConnectionTicket open_connection() { return ConnectionTicket(num_open_connections_); }
  int64_t num_open_connections() const { return num_open_connections_.load(std::memory_order_relaxed); }

  // The exposition text; `stats` is null while the model loads; `ready` is what GET /ready
  // answers (200 = true); per_engine: each replica's stats (ServingEngine::replica_stats()).
  // Thread-safe.
  std::string render(const scheduler::EngineStats* stats, bool ready,
                     std::span<const scheduler::EngineStats> per_engine = {});

  // Tokens/s over the window ending at `now` (exposed for tests).
  double generation_rate(Clock::time_point now);

 private:
  struct StreamSlot {
    int32_t slot = -1;
    double ema_gap_s = 0.0;
  };
  class EngineTap;
  // One replica's own series and the stats of its previous scrape (scrape_mutex_).
  struct EngineSeries {
    std::vector<std::unique_ptr<MetricSet>> sets;
    std::unique_ptr<EngineTap> tap;
    std::vector<prometheus::Counter*> routes;  // by RouteReason
    scheduler::EngineStats last_stats;
  };

  MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::unique_ptr<MetricSet>> sets_;
  std::unique_ptr<ProcessMetrics> process_;  // process_* and HTTP response counts
  std::vector<EngineSeries> engines_;         // replicas only
  std::vector<MetricSet*> response_sets_;     // the sets that count responses and errors

  // Per-stream rate: engine threads (several with replicas: ids are the router's).
  std::mutex streams_mutex_;  // guards streams_ and slot_busy_
  std::unordered_map<scheduler::RequestId, StreamSlot> streams_;
  std::vector<bool> slot_busy_;

  std::atomic<int64_t> num_open_connections_{0};

  std::mutex window_mutex_;  // guards the window
  std::deque<std::pair<Clock::time_point, int64_t>> window_;  // (step end, tokens emitted)

  std::mutex scrape_mutex_;  // one scrape at a time; guards last_stats_
  scheduler::EngineStats last_stats_;
};

}  // namespace deltaserve::server
