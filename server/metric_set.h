// One naming scheme of the daemon's metrics on a shared prometheus-cpp registry. The
// deltaserve_ set is always there; the vllm: set (same observations under vLLM's names and
// labels) is added by a switch so vLLM dashboards and benchmark tools read us unchanged.
// ServerMetrics fans every observation out to each set. Families are created once in the
// constructor; the methods only touch existing (atomic) metric objects, except where noted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "scheduler/engine_stats.h"
#include "server/serving_engine.h"

namespace deltaserve::server {

// What the HTTP layer knows at scrape time, whether or not a model is loaded.
struct ServerGauges {
  bool ready = false;                // GET /ready answers 200
  int64_t num_open_connections = 0;  // HTTP sessions alive
};

// Why a response ended, as the client saw it (bounded label values).
enum class ResponseEnd { Stop, Length, Abort, Error };
const char* response_end_name(ResponseEnd end);

class MetricSet {
 public:
  virtual ~MetricSet() = default;
  // Called once, before the engine runs: limits that size per-slot series and totals.
  virtual void set_limits(const EngineLimits&) {}
  // Engine thread.
  virtual void step(const scheduler::StepReport&) {}
  virtual void inter_token(double gap_s) { (void)gap_s; }
  virtual void request_finished(const scheduler::RequestReport&) {}
  virtual void drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) {
    (void)position; (void)num_drafted; (void)num_accepted;
  }
  virtual void stream_rate(int32_t slot, double tokens_per_s) { (void)slot; (void)tokens_per_s; }
  // Any thread.
  virtual void response_finished(ResponseEnd) {}
  virtual void error(const std::string& type) { (void)type; }
  // At scrape time (serialised by ServerMetrics): gauges from the engine's snapshot;
  // counters the engine keeps as totals advance by `delta` since the previous scrape.
  virtual void refresh(const scheduler::EngineStats& stats, const scheduler::EngineStats& delta,
                       double generation_tokens_per_s) {
    (void)stats; (void)delta; (void)generation_tokens_per_s;
  }
  // At every scrape (serialised by ServerMetrics), also while the model loads.
  virtual void refresh_server(const ServerGauges& gauges) { (void)gauges; }
};

std::unique_ptr<MetricSet> make_deltaserve_metrics(prometheus::Registry& registry);
// engine: the value of vLLM's engine label ("0" for one engine; the index per replica).
std::unique_ptr<MetricSet> make_vllm_metrics(prometheus::Registry& registry,
                                             const std::string& model_name, const std::string& engine = "0");
// --split replicas: one engine's deltaserve_engine_* series (server/engine_metrics.cpp).
std::unique_ptr<MetricSet> make_engine_metrics(prometheus::Registry& registry, int32_t engine, const std::string& device);

// Bucket layouts shared by both sets (seconds unless named otherwise).
prometheus::Histogram::BucketBoundaries ttft_buckets();
prometheus::Histogram::BucketBoundaries inter_token_buckets();
prometheus::Histogram::BucketBoundaries request_latency_buckets();
prometheus::Histogram::BucketBoundaries queue_time_buckets();
prometheus::Histogram::BucketBoundaries step_time_buckets();
prometheus::Histogram::BucketBoundaries rows_per_step_buckets();
prometheus::Histogram::BucketBoundaries draft_depth_buckets();      // 0, 1, .., runtime::kMaxDraftDepth
prometheus::Histogram::BucketBoundaries step_time_ratio_buckets();  // measured / predicted step time
prometheus::Histogram::BucketBoundaries decode_rate_buckets();  // tokens/s
prometheus::Histogram::BucketBoundaries token_count_buckets(int64_t max_tokens);  // 1-2-5

}  // namespace deltaserve::server
