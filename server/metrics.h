// The daemon's metrics: one prometheus-cpp registry (core library only), rendered in the
// text exposition format by our own HTTP server at GET /metrics. Feeds on three sources:
// - the engine, through the EngineObserver callbacks (engine thread; cheap, no blocking);
// - the sessions: error responses, how each response ended, open connections (any I/O thread);
// - the engine's stats snapshot, read at scrape time (running/waiting, KV, slots, memory).
// Derived here: the aggregate generation rate over a sliding window and a per-stream decode
// rate published per slot (bounded cardinality: one series per state slot).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <prometheus/registry.h>

#include "scheduler/engine_stats.h"
#include "server/metric_set.h"
#include "server/process_metrics.h"
#include "server/serving_engine.h"

namespace deltaserve::server {

struct MetricsOptions {
  std::string model_name;
  bool vllm_names = false;     // also export the vllm: set
  double rate_window_s = 10.0; // sliding window of deltaserve_generation_tokens_per_second
};

class ServerMetrics final : public scheduler::EngineObserver {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServerMetrics(MetricsOptions options);

  // Once, after the engine is built and before it serves: sizes the per-slot series.
  void set_limits(const EngineLimits& limits);

  // EngineObserver (engine thread).
  void on_step(const scheduler::StepReport& report) override;
  void on_inter_token(scheduler::RequestId id, double gap_ms) override;
  void on_request_finished(const scheduler::RequestReport& report) override;
  void on_drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) override;

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
  // answers (200 = true). Thread-safe.
  std::string render(const scheduler::EngineStats* stats, bool ready);

  // Tokens/s over the window ending at `now` (exposed for tests).
  double generation_rate(Clock::time_point now);

 private:
  struct StreamSlot {
    int32_t slot = -1;
    double ema_gap_s = 0.0;
  };

  MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::unique_ptr<MetricSet>> sets_;
  std::unique_ptr<ProcessMetrics> process_;  // process_* and HTTP response counts

  // Per-stream rate: engine thread only.
  std::unordered_map<scheduler::RequestId, StreamSlot> streams_;
  std::vector<bool> slot_busy_;

  std::atomic<int64_t> num_open_connections_{0};

  std::mutex window_mutex_;  // guards the window
  std::deque<std::pair<Clock::time_point, int64_t>> window_;  // (step end, tokens emitted)

  std::mutex scrape_mutex_;  // one scrape at a time; guards last_stats_
  scheduler::EngineStats last_stats_;
};

}  // namespace deltaserve::server
