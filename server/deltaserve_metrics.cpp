// The deltaserve_ metric set. Every name is listed in deploy/ dashboards and docs; keep
// them stable. Counters end in _total, durations are in seconds, rates in tokens/s.
#include <array>
#include <map>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "server/metric_set.h"

#ifndef DELTASERVE_VERSION
#define DELTASERVE_VERSION "unknown"
#endif
// The source commit, read by CMake at configure time (stale until the next configure);
// "unknown" outside a git checkout.
#ifndef DELTASERVE_COMMIT
#define DELTASERVE_COMMIT "unknown"
#endif
// The GPU backend compiled in; "cpu" when none (the CPU backend is always there).
#ifndef DELTASERVE_BACKEND
#define DELTASERVE_BACKEND "cpu"
#endif

namespace deltaserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

// The error classes (ApiError::metric_label, plus stream_error); pre-created so they read 0.
constexpr std::array<const char*, 7> kErrorTypes = {
    "invalid_request_error", "authentication_error", "not_found_error", "rate_limit_error",
    "service_unavailable_error", "server_error", "stream_error"};

Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}

Counter& counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(r).Add({});
}

Histogram& histogram(prometheus::Registry& r, const std::string& name, const std::string& help,
                     const Histogram::BucketBoundaries& buckets) {
  return BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
}

class DeltaserveMetrics final : public MetricSet {
 public:
  explicit DeltaserveMetrics(prometheus::Registry& r)
      : running_(gauge(r, "deltaserve_requests_running", "Requests running in the engine.")),
        waiting_(gauge(r, "deltaserve_requests_waiting", "Requests waiting for a slot.")),
        prompt_tokens_(counter(r, "deltaserve_prompt_tokens_total",
                               "Prompt tokens of finished requests.")),
        generation_tokens_(counter(r, "deltaserve_generation_tokens_total",
                                   "Tokens emitted by the engine (accepted drafts included).")),
        generation_rate_(gauge(r, "deltaserve_generation_tokens_per_second",
                               "Aggregate generation rate over the sliding window (tokens/s).")),
        stream_rate_family_(BuildGauge()
                                .Name("deltaserve_stream_decode_tokens_per_second")
                                .Help("Decode rate of the stream in each slot (tokens/s); 0 when the slot is idle.")
                                .Register(r)),
        request_rate_(histogram(r, "deltaserve_request_decode_tokens_per_second",
                                "Per-request decode rate after the first token (tokens/s).",
                                decode_rate_buckets())),
        ttft_(histogram(r, "deltaserve_time_to_first_token_seconds",
                        "Submit to first token, per request.", ttft_buckets())),
        itl_(histogram(r, "deltaserve_inter_token_latency_seconds",
                       "Gap between consecutive tokens of a request, per token.",
                       inter_token_buckets())),
        e2e_(histogram(r, "deltaserve_e2e_request_latency_seconds",
                       "Submit to finish, per request.", request_latency_buckets())),
        queue_(histogram(r, "deltaserve_request_queue_time_seconds",
                         "Submit to first scheduled, per request.", queue_time_buckets())),
        step_time_(histogram(r, "deltaserve_step_duration_seconds", "Engine step time.",
                             step_time_buckets())),
        step_rows_(histogram(r, "deltaserve_step_rows", "Rows (tokens) per engine step.",
                             rows_per_step_buckets())),
        kv_used_(gauge(r, "deltaserve_kv_blocks_used", "KV-cache blocks in use.")),
        kv_total_(gauge(r, "deltaserve_kv_blocks_capacity", "KV-cache blocks in the pool.")),
        slots_used_(gauge(r, "deltaserve_state_slots_used", "Recurrent-state slots in use.")),
        slots_total_(gauge(r, "deltaserve_state_slots_capacity", "Recurrent-state slots in the pool.")),
        preemptions_(counter(r, "deltaserve_preemptions_total", "Sequences preempted.")),
        cancellations_(counter(r, "deltaserve_cancellations_total",
                               "Requests cancelled (client gone, stop string, shutdown).")),
        cache_queries_(counter(r, "deltaserve_prefix_cache_queries_total", "Requests whose admission looked the prefix cache up (preempted sequences' re-admissions not included).")),
        cache_hits_(counter(r, "deltaserve_prefix_cache_hits_total", "Requests that resumed from a cached prefix at their admission.")),
        cache_query_tokens_(counter(r, "deltaserve_prefix_cache_query_tokens_total", "Prompt tokens of the requests that looked the prefix cache up.")),
        cache_hit_tokens_(counter(r, "deltaserve_prefix_cache_hit_tokens_total", "Prompt tokens the prefix cache supplied (not computed).")),
        cache_preempted_queries_(counter(r, "deltaserve_prefix_cache_preempted_queries_total", "Re-admissions of preempted sequences, which looked the prefix cache up.")),
        cache_preempted_hits_(counter(r, "deltaserve_prefix_cache_preempted_hits_total", "Re-admissions of preempted sequences that resumed from a checkpoint.")),
        cache_preempted_query_tokens_(counter(r, "deltaserve_prefix_cache_preempted_query_tokens_total", "Tokens (prompt and generated) of the re-admitted preempted sequences.")),
        cache_preempted_hit_tokens_(counter(r, "deltaserve_prefix_cache_preempted_hit_tokens_total", "Tokens of re-admitted preempted sequences that the prefix cache supplied (not recomputed).")),
        cache_evictions_(counter(r, "deltaserve_prefix_cache_evictions_total", "Prefix-cache checkpoints dropped (budget, KV pressure, reset).")),
        cache_bytes_family_(BuildGauge()
                                .Name("deltaserve_prefix_cache_bytes")
                                .Help("Bytes of recurrent-state checkpoints the prefix cache holds, by tier (device, host).")
                                .Register(r)),
        cache_device_bytes_(cache_bytes_family_.Add({{"tier", "device"}})),
        cache_host_bytes_(cache_bytes_family_.Add({{"tier", "host"}})),
        cache_checkpoints_(gauge(r, "deltaserve_prefix_cache_checkpoints", "Recurrent-state checkpoints the prefix cache holds.")),
        cache_blocks_(gauge(r, "deltaserve_prefix_cache_kv_blocks", "KV blocks only the prefix cache holds (free capacity: evicted on demand; not in deltaserve_kv_blocks_used).")),
        pinned_bytes_(gauge(r, "deltaserve_pinned_host_bytes", "Host memory registered with the device.")),
        pinned_registrations_(gauge(r, "deltaserve_pinned_host_registrations",
                                    "Host-memory registrations with the device.")),
        device_used_(gauge(r, "deltaserve_device_memory_used_bytes",
                           "Device memory the backend holds (weights, caches, workspaces); "
                           "flat after load. 0 on the CPU backend.")),
        device_total_(gauge(r, "deltaserve_device_memory_total_bytes",
                            "Memory capacity of the backend's device. 0 on the CPU backend.")),
        split_bytes_family_(BuildCounter()
                                .Name("deltaserve_layer_split_transfer_bytes_total")
                                .Help("Activation bytes copied from one device of a layer split to the next (from, to).")
                                .Register(r)),
        split_seconds_family_(BuildCounter()
                                  .Name("deltaserve_layer_split_transfer_seconds_total")
                                  .Help("Time of the activation copies between devices of a layer split, staging included (from, to).")
                                  .Register(r)),
        split_copies_family_(BuildCounter()
                                 .Name("deltaserve_layer_split_transfers_total")
                                 .Help("Activation copies between devices of a layer split (one per forward step and device boundary).")
                                 .Register(r)),
        split_memory_family_(BuildGauge()
                                 .Name("deltaserve_layer_split_device_memory_bytes")
                                 .Help("Memory each device of a layer split holds: weights of its layers, KV pools, recurrent states, checkpoints, staging.")
                                 .Register(r)),
        split_layers_family_(BuildGauge()
                                 .Name("deltaserve_layer_split_device_layers")
                                 .Help("Trunk layers each device of a layer split holds.")
                                 .Register(r)),
        ready_(gauge(r, "deltaserve_ready",
                     "1 while GET /ready answers 200; 0 while the model loads or the server drains.")),
        open_connections_(gauge(r, "deltaserve_open_connections",
                                "HTTP connections currently open (the scraping one included).")),
        errors_family_(BuildCounter()
                           .Name("deltaserve_errors_total")
                           .Help("Error responses and failed streams, by error class (of the HTTP status).")
                           .Register(r)),
        finished_family_(BuildCounter()
                             .Name("deltaserve_requests_finished_total")
                             .Help("Finished generation requests by how they ended for the client.")
                             .Register(r)),
        drafts_(counter(r, "deltaserve_spec_decode_num_drafts_total", "Speculative draft runs.")),
        draft_tokens_(counter(r, "deltaserve_spec_decode_num_draft_tokens_total", "Draft tokens proposed.")),
        accepted_tokens_(counter(r, "deltaserve_spec_decode_num_accepted_tokens_total",
                                 "Draft tokens accepted.")),
        drafted_per_pos_family_(BuildCounter()
                                    .Name("deltaserve_spec_decode_num_draft_tokens_per_pos_total")
                                    .Help("Draft tokens proposed, by draft position.")
                                    .Register(r)),
        accepted_per_pos_family_(BuildCounter()
                                     .Name("deltaserve_spec_decode_num_accepted_tokens_per_pos_total")
                                     .Help("Draft tokens accepted, by draft position.")
                                     .Register(r)),
        draft_depth_(histogram(r, "deltaserve_spec_decode_draft_depth",
                               "Draft depth the speculation policy chose, per decoding stream that may draft and step.",
                               draft_depth_buckets())),
        predicted_step_time_(histogram(r, "deltaserve_spec_decode_predicted_step_duration_seconds",
                                       "Step time the speculation policy's cost model predicted, per decode step.",
                                       step_time_buckets())),
        step_time_ratio_(histogram(r, "deltaserve_spec_decode_step_time_ratio",
                                   "Measured over predicted step time, per decode step (1 = the cost model is exact).",
                                   step_time_ratio_buckets())) {
    BuildGauge()
        .Name("deltaserve_build_info")
        .Help("Build information (value 1): version, GPU backend compiled in (cpu when none), "
              "source commit.")
        .Register(r)
        .Add({{"version", DELTASERVE_VERSION}, {"backend", DELTASERVE_BACKEND}, {"commit", DELTASERVE_COMMIT}})
        .Set(1);
    for (const char* type : kErrorTypes) errors_family_.Add({{"type", type}});
    for (ResponseEnd end : {ResponseEnd::Stop, ResponseEnd::Length, ResponseEnd::Abort, ResponseEnd::Error}) {
      finished_family_.Add({{"finished_reason", response_end_name(end)}});
    }
  }

  void set_limits(const EngineLimits& limits) override {
    for (int32_t slot = 0; slot < limits.max_streams; ++slot) {
      stream_rates_.push_back(&stream_rate_family_.Add({{"slot", std::to_string(slot)}}));
    }
    for (int32_t pos = 0; pos < limits.max_draft_depth; ++pos) {
      drafted_per_pos_.push_back(&drafted_per_pos_family_.Add({{"position", std::to_string(pos)}}));
      accepted_per_pos_.push_back(&accepted_per_pos_family_.Add({{"position", std::to_string(pos)}}));
    }
  }

  void step(const scheduler::StepReport& s) override {
    step_time_.Observe(s.step_ms / 1000.0);
    step_rows_.Observe(s.num_rows);
    generation_tokens_.Increment(s.num_generated_tokens);
    // Depth d lands in bucket d (boundaries 0, 1, .., kMaxDraftDepth; the +Inf bucket stays 0).
    std::vector<double> depth_counts(s.draft_depths.size() + 1, 0.0);
    double depth_sum = 0.0, num_streams = 0.0;
    for (size_t d = 0; d < s.draft_depths.size(); ++d) {
      depth_counts[d] = s.draft_depths[d];
      depth_sum += static_cast<double>(d) * s.draft_depths[d];
      num_streams += s.draft_depths[d];
    }
    if (num_streams > 0) draft_depth_.ObserveMultiple(depth_counts, depth_sum);
    if (s.predicted_step_ms > 0.0) {
      predicted_step_time_.Observe(s.predicted_step_ms / 1000.0);
      step_time_ratio_.Observe(s.step_ms / s.predicted_step_ms);
    }
  }

  void inter_token(double gap_s) override { itl_.Observe(gap_s); }

  void request_finished(const scheduler::RequestReport& r) override {
    prompt_tokens_.Increment(r.num_prompt_tokens);
    e2e_.Observe(r.e2e_ms / 1000.0);
    if (r.num_generated_tokens > 0) {
      ttft_.Observe(r.ttft_ms / 1000.0);
      queue_.Observe(r.queue_ms / 1000.0);
    }
    if (r.num_generated_tokens > 1 && r.decode_tokens_per_s > 0.0) {
      request_rate_.Observe(r.decode_tokens_per_s);
    }
  }

  void drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) override {
    if (position == 0) drafts_.Increment(num_drafted);
    draft_tokens_.Increment(num_drafted);
    accepted_tokens_.Increment(num_accepted);
    if (position >= 0 && position < static_cast<int32_t>(drafted_per_pos_.size())) {
      drafted_per_pos_[position]->Increment(num_drafted);
      accepted_per_pos_[position]->Increment(num_accepted);
    }
  }

  void stream_rate(int32_t slot, double tokens_per_s) override {
    if (slot >= 0 && slot < static_cast<int32_t>(stream_rates_.size())) {
      stream_rates_[slot]->Set(tokens_per_s);
    }
  }

  void response_finished(ResponseEnd end) override {
    finished_family_.Add({{"finished_reason", response_end_name(end)}}).Increment();
  }

  void error(const std::string& type) override { errors_family_.Add({{"type", type}}).Increment(); }

  void refresh(const scheduler::EngineStats& s, const scheduler::EngineStats& delta,
               double generation_tokens_per_s) override {
    running_.Set(s.num_running);
    waiting_.Set(s.num_waiting);
    kv_used_.Set(s.num_kv_blocks_used);
    kv_total_.Set(s.num_kv_blocks_total);
    slots_used_.Set(s.num_state_slots_used);
    slots_total_.Set(s.num_state_slots_total);
    pinned_bytes_.Set(static_cast<double>(s.pinned_bytes));
    pinned_registrations_.Set(static_cast<double>(s.pinned_registrations));
    device_used_.Set(static_cast<double>(s.device_bytes_used));
    device_total_.Set(static_cast<double>(s.device_bytes_total));
    preemptions_.Increment(static_cast<double>(delta.num_preemptions));
    cancellations_.Increment(static_cast<double>(delta.num_cancellations));
    cache_queries_.Increment(static_cast<double>(delta.prefix_cache_queries));
    cache_hits_.Increment(static_cast<double>(delta.prefix_cache_hits));
    cache_query_tokens_.Increment(static_cast<double>(delta.prefix_cache_query_tokens));
    cache_hit_tokens_.Increment(static_cast<double>(delta.prefix_cache_hit_tokens));
    cache_preempted_queries_.Increment(static_cast<double>(delta.prefix_cache_preempted_queries));
    cache_preempted_hits_.Increment(static_cast<double>(delta.prefix_cache_preempted_hits));
    cache_preempted_query_tokens_.Increment(static_cast<double>(delta.prefix_cache_preempted_query_tokens));
    cache_preempted_hit_tokens_.Increment(static_cast<double>(delta.prefix_cache_preempted_hit_tokens));
    cache_evictions_.Increment(static_cast<double>(delta.prefix_cache_evictions));
    cache_device_bytes_.Set(static_cast<double>(s.prefix_cache_device_bytes));
    cache_host_bytes_.Set(static_cast<double>(s.prefix_cache_host_bytes));
    cache_checkpoints_.Set(s.prefix_cache_checkpoints);
    cache_blocks_.Set(s.num_kv_blocks_cached);
    generation_rate_.Set(generation_tokens_per_s);
    refresh_split(s.split_devices);
  }

  void refresh_server(const ServerGauges& g) override {
    ready_.Set(g.ready ? 1.0 : 0.0);
    open_connections_.Set(static_cast<double>(g.num_open_connections));
  }

 private:
  // The layer split's series, created at the first scrape that sees the devices; the hop
  // counters advance by what crossed since the previous scrape (the stats are totals).
  void refresh_split(const std::vector<runtime::SplitDeviceStats>& devices) {
    last_links_.resize(devices.size());
    for (size_t d = 0; d < devices.size(); ++d) {
      const runtime::SplitDeviceStats& dev = devices[d];
      const std::string name = runtime::device_name(dev.device);
      split_memory_family_.Add({{"device", name}}).Set(static_cast<double>(dev.bytes_used));
      split_layers_family_.Add({{"device", name}}).Set(dev.layers.size());
      if (d == 0) continue;
      const std::map<std::string, std::string> link{{"from", runtime::device_name(devices[d - 1].device)}, {"to", name}};
      runtime::LinkStats& last = last_links_[d];
      if (dev.inbound.copies >= last.copies) {
        split_bytes_family_.Add(link).Increment(static_cast<double>(dev.inbound.bytes - last.bytes));
        split_seconds_family_.Add(link).Increment(dev.inbound.seconds - last.seconds);
        split_copies_family_.Add(link).Increment(static_cast<double>(dev.inbound.copies - last.copies));
      }
      last = dev.inbound;
    }
  }

  Gauge& running_;
  Gauge& waiting_;
  Counter& prompt_tokens_;
  Counter& generation_tokens_;
  Gauge& generation_rate_;
  prometheus::Family<Gauge>& stream_rate_family_;
  std::vector<Gauge*> stream_rates_;
  Histogram& request_rate_;
  Histogram& ttft_;
  Histogram& itl_;
  Histogram& e2e_;
  Histogram& queue_;
  Histogram& step_time_;
  Histogram& step_rows_;
  Gauge& kv_used_;
  Gauge& kv_total_;
  Gauge& slots_used_;
  Gauge& slots_total_;
  Counter& preemptions_;
  Counter& cancellations_;
  Counter& cache_queries_;
  Counter& cache_hits_;
  Counter& cache_query_tokens_;
  Counter& cache_hit_tokens_;
  Counter& cache_preempted_queries_;
  Counter& cache_preempted_hits_;
  Counter& cache_preempted_query_tokens_;
  Counter& cache_preempted_hit_tokens_;
  Counter& cache_evictions_;
  prometheus::Family<Gauge>& cache_bytes_family_;
  Gauge& cache_device_bytes_;
  Gauge& cache_host_bytes_;
  Gauge& cache_checkpoints_;
  Gauge& cache_blocks_;
  Gauge& pinned_bytes_;
  Gauge& pinned_registrations_;
  Gauge& device_used_;
  Gauge& device_total_;
  prometheus::Family<Counter>& split_bytes_family_;
  prometheus::Family<Counter>& split_seconds_family_;
  prometheus::Family<Counter>& split_copies_family_;
  prometheus::Family<Gauge>& split_memory_family_;
  prometheus::Family<Gauge>& split_layers_family_;
  std::vector<runtime::LinkStats> last_links_;  // per device: its inbound hop at the previous scrape
  Gauge& ready_;
  Gauge& open_connections_;
  prometheus::Family<Counter>& errors_family_;
  prometheus::Family<Counter>& finished_family_;
  Counter& drafts_;
  Counter& draft_tokens_;
  Counter& accepted_tokens_;
  prometheus::Family<Counter>& drafted_per_pos_family_;
  prometheus::Family<Counter>& accepted_per_pos_family_;
  std::vector<Counter*> drafted_per_pos_;
  std::vector<Counter*> accepted_per_pos_;
  Histogram& draft_depth_;
  Histogram& predicted_step_time_;
  Histogram& step_time_ratio_;
};

}  // namespace

const char* response_end_name(ResponseEnd end) {
  switch (end) {
    case ResponseEnd::Stop: return "stop";
    case ResponseEnd::Length: return "length";
    case ResponseEnd::Abort: return "abort";
    case ResponseEnd::Error: return "error";
  }
  return "error";
}

std::unique_ptr<MetricSet> make_deltaserve_metrics(prometheus::Registry& registry) {
  return std::make_unique<DeltaserveMetrics>(registry);
}

prometheus::Histogram::BucketBoundaries ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

prometheus::Histogram::BucketBoundaries inter_token_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
          0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

prometheus::Histogram::BucketBoundaries request_latency_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

prometheus::Histogram::BucketBoundaries queue_time_buckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
          120.0, 300.0};
}

prometheus::Histogram::BucketBoundaries step_time_buckets() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0};
}

prometheus::Histogram::BucketBoundaries draft_depth_buckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (int32_t d = 0; d <= runtime::kMaxDraftDepth; ++d) buckets.push_back(d);
  return buckets;
}

prometheus::Histogram::BucketBoundaries step_time_ratio_buckets() {
  return {0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0};
}

prometheus::Histogram::BucketBoundaries rows_per_step_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

prometheus::Histogram::BucketBoundaries decode_rate_buckets() {
  return {1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000, 5000};
}

prometheus::Histogram::BucketBoundaries token_count_buckets(int64_t max_tokens) {
  prometheus::Histogram::BucketBoundaries buckets;
  for (int64_t scale = 1; scale <= max_tokens; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale <= max_tokens) buckets.push_back(static_cast<double>(m * scale));
    }
  }
  return buckets;
}

}  // namespace deltaserve::server
