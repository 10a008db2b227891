#include "server/metrics.h"

#include <algorithm>

#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

namespace deltaserve::server {
namespace {

// Weight of the newest gap in a stream's rate: about the last ten tokens dominate.
constexpr double kRateSmoothing = 0.2;

// What the engine's counters (kept as totals) grew by since `before`; a prefix-cache reset
// never lowers them.
scheduler::EngineStats counter_delta(const scheduler::EngineStats& now, const scheduler::EngineStats& before) {
  auto grown = [](uint64_t after, uint64_t earlier) { return after >= earlier ? after - earlier : 0; };
  scheduler::EngineStats delta;
  delta.num_preemptions = grown(now.num_preemptions, before.num_preemptions);
  delta.num_cancellations = grown(now.num_cancellations, before.num_cancellations);
  delta.prefix_cache_queries = grown(now.prefix_cache_queries, before.prefix_cache_queries);
  delta.prefix_cache_hits = grown(now.prefix_cache_hits, before.prefix_cache_hits);
  delta.prefix_cache_query_tokens = grown(now.prefix_cache_query_tokens, before.prefix_cache_query_tokens);
  delta.prefix_cache_hit_tokens = grown(now.prefix_cache_hit_tokens, before.prefix_cache_hit_tokens);
  delta.prefix_cache_preempted_queries = grown(now.prefix_cache_preempted_queries, before.prefix_cache_preempted_queries);
  delta.prefix_cache_preempted_hits = grown(now.prefix_cache_preempted_hits, before.prefix_cache_preempted_hits);
  delta.prefix_cache_preempted_query_tokens =
      grown(now.prefix_cache_preempted_query_tokens, before.prefix_cache_preempted_query_tokens);
  delta.prefix_cache_preempted_hit_tokens = grown(now.prefix_cache_preempted_hit_tokens, before.prefix_cache_preempted_hit_tokens);
  delta.prefix_cache_evictions = grown(now.prefix_cache_evictions, before.prefix_cache_evictions);
  return delta;
}

// The base of the next delta: each engine total only moves forward. Two scrapes at once may
// render their snapshots out of order; an older one must not pull the base back, or the next
// scrape would count the same growth twice.
void advance_base(scheduler::EngineStats& base, const scheduler::EngineStats& now) {
  auto up = [](uint64_t& b, uint64_t n) { b = std::max(b, n); };
  up(base.num_preemptions, now.num_preemptions);
  up(base.num_cancellations, now.num_cancellations);
  up(base.prefix_cache_queries, now.prefix_cache_queries);
  up(base.prefix_cache_hits, now.prefix_cache_hits);
  up(base.prefix_cache_query_tokens, now.prefix_cache_query_tokens);
  up(base.prefix_cache_hit_tokens, now.prefix_cache_hit_tokens);
  up(base.prefix_cache_preempted_queries, now.prefix_cache_preempted_queries);
  up(base.prefix_cache_preempted_hits, now.prefix_cache_preempted_hits);
  up(base.prefix_cache_preempted_query_tokens, now.prefix_cache_preempted_query_tokens);
  up(base.prefix_cache_preempted_hit_tokens, now.prefix_cache_preempted_hit_tokens);
  up(base.prefix_cache_evictions, now.prefix_cache_evictions);
}

}  // namespace

// One replica's observer: its observations feed the daemon's series (with the router's request
// ids, so the per-slot rates of two engines never mix) and the engine's own.
class ServerMetrics::EngineTap final : public scheduler::EngineObserver {
 public:
  EngineTap(ServerMetrics& metrics, int32_t index, int32_t num_engines, std::string device)
      : metrics_(metrics), index_(index), num_engines_(num_engines), device_(std::move(device)) {}

  void on_step(const scheduler::StepReport& report) override {
    metrics_.on_step(report);
    for (auto& set : own_sets()) set->step(report);
  }
  void on_inter_token(scheduler::RequestId id, double gap_ms) override {
    metrics_.on_inter_token(routed(id), gap_ms);
    for (auto& set : own_sets()) set->inter_token(gap_ms / 1000.0);
  }
  void on_request_finished(const scheduler::RequestReport& report) override {
    scheduler::RequestReport routed_report = report;
    routed_report.id = routed(report.id);
    metrics_.on_request_finished(routed_report);
    for (auto& set : own_sets()) set->request_finished(report);
  }
  void on_drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) override {
    metrics_.on_drafts(position, num_drafted, num_accepted);
    for (auto& set : own_sets()) set->drafts(position, num_drafted, num_accepted);
  }
  void on_engine_error(const std::string& message) override {
    metrics_.on_engine_error("engine " + std::to_string(index_) + " (" + device_ + "): " + message);
  }

 private:
  // ReplicaEngine's numbering: local * num_engines + engine.
  scheduler::RequestId routed(scheduler::RequestId id) const {
    return id * static_cast<uint64_t>(num_engines_) + static_cast<uint64_t>(index_);
  }
  std::vector<std::unique_ptr<MetricSet>>& own_sets() { return metrics_.engines_[static_cast<size_t>(index_)].sets; }

  ServerMetrics& metrics_;
  const int32_t index_;
  const int32_t num_engines_;
  const std::string device_;
};

ServerMetrics::ServerMetrics(MetricsOptions options)
    : options_(std::move(options)), registry_(std::make_shared<prometheus::Registry>()) {
  sets_.push_back(make_deltaserve_metrics(*registry_));
  const std::vector<std::string>& devices = options_.engine_devices;
  if (devices.size() < 2) {
    if (options_.vllm_names) sets_.push_back(make_vllm_metrics(*registry_, options_.model_name));
    for (auto& set : sets_) response_sets_.push_back(set.get());
  } else {
    response_sets_.push_back(sets_.front().get());
    auto& routes = prometheus::BuildCounter()
                       .Name("deltaserve_router_decisions_total")
                       .Help("Requests the replica router sent to each engine, by reason: prefix (its cache held the "
                             "prompt's prefix) or load (the least loaded engine).")
                       .Register(*registry_);
    engines_.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      EngineSeries& e = engines_[i];
      const auto index = static_cast<int32_t>(i);
      e.sets.push_back(make_engine_metrics(*registry_, index, devices[i]));
      // vLLM's names per engine; the responses (request_success) count on engine 0's.
      if (options_.vllm_names) {
        e.sets.push_back(make_vllm_metrics(*registry_, options_.model_name, std::to_string(i)));
        if (i == 0) response_sets_.push_back(e.sets.back().get());
      }
      e.tap = std::make_unique<EngineTap>(*this, index, static_cast<int32_t>(devices.size()), devices[i]);
      for (const RouteReason reason : {RouteReason::kPrefix, RouteReason::kLoad}) {
        e.routes.push_back(&routes.Add({{"engine", std::to_string(i)}, {"reason", route_reason_name(reason)}}));
      }
    }
  }
  process_ = std::make_unique<ProcessMetrics>(*registry_);
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::set_limits(const EngineLimits& limits, std::span<const EngineLimits> per_engine) {
  {
    std::lock_guard lock(streams_mutex_);
    slot_busy_.assign(static_cast<size_t>(std::max(limits.max_streams, 0)), false);
  }
  for (auto& set : sets_) set->set_limits(limits);
  for (size_t i = 0; i < engines_.size() && i < per_engine.size(); ++i) {
    for (auto& set : engines_[i].sets) set->set_limits(per_engine[i]);
  }
}

scheduler::EngineObserver* ServerMetrics::engine_observer(int32_t index) {
  if (engines_.empty()) return this;
  return engines_.at(static_cast<size_t>(index)).tap.get();
}

void ServerMetrics::on_route(int32_t engine, RouteReason reason) {
  if (engine < 0 || static_cast<size_t>(engine) >= engines_.size()) return;
  engines_[static_cast<size_t>(engine)].routes[reason == RouteReason::kPrefix ? 0 : 1]->Increment();
}

void ServerMetrics::on_engine_error(const std::string& message) { spdlog::error("engine: {}", message); }

void ServerMetrics::on_step(const scheduler::StepReport& report) {
  for (auto& set : sets_) set->step(report);
  if (report.num_generated_tokens <= 0) return;
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(window_mutex_);
  window_.emplace_back(now, report.num_generated_tokens);
  const auto horizon = now - std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options_.rate_window_s));
  while (!window_.empty() && window_.front().first < horizon) window_.pop_front();
}

double ServerMetrics::generation_rate(Clock::time_point now) {
  const auto horizon = now - std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options_.rate_window_s));
  std::lock_guard lock(window_mutex_);
  int64_t tokens = 0;
  for (const auto& [when, n] : window_) {
    if (when >= horizon) tokens += n;
  }
  return static_cast<double>(tokens) / options_.rate_window_s;
}

void ServerMetrics::on_inter_token(scheduler::RequestId id, double gap_ms) {
  const double gap_s = gap_ms / 1000.0;
  for (auto& set : sets_) set->inter_token(gap_s);
  std::lock_guard lock(streams_mutex_);
  auto [it, inserted] = streams_.try_emplace(id);
  StreamSlot& s = it->second;
  if (inserted) {
    for (size_t i = 0; i < slot_busy_.size(); ++i) {
      if (!slot_busy_[i]) {
        slot_busy_[i] = true;
        s.slot = static_cast<int32_t>(i);
        break;
      }
    }
    s.ema_gap_s = gap_s;
  } else {
    s.ema_gap_s += kRateSmoothing * (gap_s - s.ema_gap_s);
  }
  if (s.slot >= 0 && s.ema_gap_s > 0.0) {
    for (auto& set : sets_) set->stream_rate(s.slot, 1.0 / s.ema_gap_s);
  }
}

void ServerMetrics::on_request_finished(const scheduler::RequestReport& report) {
  for (auto& set : sets_) set->request_finished(report);
  std::lock_guard lock(streams_mutex_);
  const auto it = streams_.find(report.id);
  if (it == streams_.end()) return;
  if (it->second.slot >= 0) {
    slot_busy_[static_cast<size_t>(it->second.slot)] = false;
    for (auto& set : sets_) set->stream_rate(it->second.slot, 0.0);
  }
  streams_.erase(it);
}

void ServerMetrics::on_drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) {
  for (auto& set : sets_) set->drafts(position, num_drafted, num_accepted);
}

void ServerMetrics::on_error(const std::string& type) {
  for (MetricSet* set : response_sets_) set->error(type);
}

void ServerMetrics::on_response_finished(ResponseEnd end) {
  for (MetricSet* set : response_sets_) set->response_finished(end);
}

std::string ServerMetrics::render(const scheduler::EngineStats* stats, bool ready,
                                  std::span<const scheduler::EngineStats> per_engine) {
  std::lock_guard lock(scrape_mutex_);
  const ServerGauges gauges{ready, num_open_connections()};
  for (auto& set : sets_) set->refresh_server(gauges);
  process_->refresh();
  if (stats) {
    const scheduler::EngineStats delta = counter_delta(*stats, last_stats_);
    const double rate = generation_rate(Clock::now());
    for (auto& set : sets_) set->refresh(*stats, delta, rate);
    advance_base(last_stats_, *stats);
  }
  for (size_t i = 0; i < engines_.size() && i < per_engine.size(); ++i) {
    EngineSeries& e = engines_[i];
    const scheduler::EngineStats delta = counter_delta(per_engine[i], e.last_stats);
    for (auto& set : e.sets) set->refresh(per_engine[i], delta, 0.0);
    advance_base(e.last_stats, per_engine[i]);
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace deltaserve::server
