#include "server/metrics.h"

#include <prometheus/text_serializer.h>

namespace deltaserve::server {
namespace {

// Weight of the newest gap in a stream's rate: about the last ten tokens dominate.
constexpr double kRateSmoothing = 0.2;

}  // namespace

ServerMetrics::ServerMetrics(MetricsOptions options)
    : options_(std::move(options)), registry_(std::make_shared<prometheus::Registry>()) {
  sets_.push_back(make_deltaserve_metrics(*registry_));
  if (options_.vllm_names) sets_.push_back(make_vllm_metrics(*registry_, options_.model_name));
  process_ = std::make_unique<ProcessMetrics>(*registry_);
}

void ServerMetrics::set_limits(const EngineLimits& limits) {
  slot_busy_.assign(static_cast<size_t>(std::max(limits.max_streams, 0)), false);
  for (auto& set : sets_) set->set_limits(limits);
}

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
  for (auto& set : sets_) set->error(type);
}

void ServerMetrics::on_response_finished(ResponseEnd end) {
  for (auto& set : sets_) set->response_finished(end);
}

std::string ServerMetrics::render(const scheduler::EngineStats* stats, bool ready) {
  std::lock_guard lock(scrape_mutex_);
  const ServerGauges gauges{ready, num_open_connections()};
  for (auto& set : sets_) set->refresh_server(gauges);
  process_->refresh();
  if (stats) {
    scheduler::EngineStats delta;
    delta.num_preemptions = stats->num_preemptions - last_stats_.num_preemptions;
    delta.num_cancellations = stats->num_cancellations - last_stats_.num_cancellations;
    // Counters of the prefix cache (a reset never lowers them).
    auto grown = [](uint64_t now, uint64_t before) { return now >= before ? now - before : 0; };
    delta.prefix_cache_queries = grown(stats->prefix_cache_queries, last_stats_.prefix_cache_queries);
    delta.prefix_cache_hits = grown(stats->prefix_cache_hits, last_stats_.prefix_cache_hits);
    delta.prefix_cache_query_tokens = grown(stats->prefix_cache_query_tokens, last_stats_.prefix_cache_query_tokens);
    delta.prefix_cache_hit_tokens = grown(stats->prefix_cache_hit_tokens, last_stats_.prefix_cache_hit_tokens);
    delta.prefix_cache_evictions = grown(stats->prefix_cache_evictions, last_stats_.prefix_cache_evictions);
    const double rate = generation_rate(Clock::now());
    for (auto& set : sets_) set->refresh(*stats, delta, rate);
    last_stats_ = *stats;
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace deltaserve::server
