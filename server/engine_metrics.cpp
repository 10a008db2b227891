// The per-engine series of --split replicas: deltaserve_engine_* with labels engine (its index)
// and device. The unlabelled deltaserve_* series keep meaning the whole daemon (the sum over
// the engines), so dashboards written for one engine read a replicated daemon unchanged; these
// show how the router spread the work. vLLM's names, which carry an engine label already, get
// one copy per engine instead (make_vllm_metrics with that engine's label), as vLLM's
// data-parallel deployments export them.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "server/metric_set.h"

namespace deltaserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

class EngineMetrics final : public MetricSet {
 public:
  EngineMetrics(prometheus::Registry& r, int32_t engine, const std::string& device)
      : registry_(r), labels_{{"engine", std::to_string(engine)}, {"device", device}},
        running_(gauge("deltaserve_engine_requests_running", "Requests running, per engine.")),
        waiting_(gauge("deltaserve_engine_requests_waiting", "Requests waiting for a slot, per engine.")),
        kv_used_(gauge("deltaserve_engine_kv_blocks_used", "KV-cache blocks in use, per engine.")),
        kv_total_(gauge("deltaserve_engine_kv_blocks_capacity", "KV-cache blocks in the pool, per engine.")),
        slots_used_(gauge("deltaserve_engine_state_slots_used", "Recurrent-state slots in use, per engine.")),
        slots_total_(gauge("deltaserve_engine_state_slots_capacity", "Recurrent-state slots in the pool, per engine.")),
        cache_checkpoints_(gauge("deltaserve_engine_prefix_cache_checkpoints", "Prefix-cache checkpoints, per engine.")),
        cache_blocks_(gauge("deltaserve_engine_prefix_cache_kv_blocks", "KV blocks only the prefix cache holds, per engine.")),
        pinned_bytes_(gauge("deltaserve_engine_pinned_host_bytes", "Host memory registered with the device, per engine.")),
        device_used_(gauge("deltaserve_engine_device_memory_used_bytes", "Device memory the backend holds, per engine (0 on the CPU).")),
        device_total_(gauge("deltaserve_engine_device_memory_total_bytes", "Memory capacity of the engine's device (0 on the CPU).")),
        requests_(counter("deltaserve_engine_requests_total", "Requests finished, per engine.")),
        prompt_tokens_(counter("deltaserve_engine_prompt_tokens_total", "Prompt tokens of finished requests, per engine.")),
        generation_tokens_(counter("deltaserve_engine_generation_tokens_total", "Tokens emitted, per engine.")),
        preemptions_(counter("deltaserve_engine_preemptions_total", "Sequences preempted, per engine.")),
        cache_queries_(counter("deltaserve_engine_prefix_cache_queries_total", "Requests whose admission looked the prefix cache up (preempted re-admissions not included), per engine.")),
        cache_hits_(counter("deltaserve_engine_prefix_cache_hits_total", "Requests that resumed from a cached prefix at their admission, per engine.")),
        cache_hit_tokens_(counter("deltaserve_engine_prefix_cache_hit_tokens_total", "Prompt tokens the prefix cache supplied, per engine.")),
        ttft_(histogram("deltaserve_engine_time_to_first_token_seconds", "Submit to first token, per request, per engine.", ttft_buckets())),
        e2e_(histogram("deltaserve_engine_e2e_request_latency_seconds", "Submit to finish, per request, per engine.", request_latency_buckets())),
        step_time_(histogram("deltaserve_engine_step_duration_seconds", "Engine step time, per engine.", step_time_buckets())) {}

  void step(const scheduler::StepReport& s) override {
    step_time_.Observe(s.step_ms / 1000.0);
    generation_tokens_.Increment(s.num_generated_tokens);
  }

  void request_finished(const scheduler::RequestReport& r) override {
    requests_.Increment();
    prompt_tokens_.Increment(r.num_prompt_tokens);
    e2e_.Observe(r.e2e_ms / 1000.0);
    if (r.num_generated_tokens > 0) ttft_.Observe(r.ttft_ms / 1000.0);
  }

  void refresh(const scheduler::EngineStats& s, const scheduler::EngineStats& delta, double) override {
    running_.Set(s.num_running);
    waiting_.Set(s.num_waiting);
    kv_used_.Set(s.num_kv_blocks_used);
    kv_total_.Set(s.num_kv_blocks_total);
    slots_used_.Set(s.num_state_slots_used);
    slots_total_.Set(s.num_state_slots_total);
    cache_checkpoints_.Set(s.prefix_cache_checkpoints);
    cache_blocks_.Set(s.num_kv_blocks_cached);
    pinned_bytes_.Set(static_cast<double>(s.pinned_bytes));
    device_used_.Set(static_cast<double>(s.device_bytes_used));
    device_total_.Set(static_cast<double>(s.device_bytes_total));
    preemptions_.Increment(static_cast<double>(delta.num_preemptions));
    cache_queries_.Increment(static_cast<double>(delta.prefix_cache_queries));
    cache_hits_.Increment(static_cast<double>(delta.prefix_cache_hits));
    cache_hit_tokens_.Increment(static_cast<double>(delta.prefix_cache_hit_tokens));
  }

 private:
  // The families are shared by the engines (prometheus-cpp returns the registered family for
  // the same name and help); each engine adds its own labelled child.
  Gauge& gauge(const std::string& name, const std::string& help) {
    return BuildGauge().Name(name).Help(help).Register(registry_).Add(labels_);
  }
  Counter& counter(const std::string& name, const std::string& help) {
    return BuildCounter().Name(name).Help(help).Register(registry_).Add(labels_);
  }
  Histogram& histogram(const std::string& name, const std::string& help, const Histogram::BucketBoundaries& buckets) {
    return BuildHistogram().Name(name).Help(help).Register(registry_).Add(labels_, buckets);
  }

  prometheus::Registry& registry_;
  const prometheus::Labels labels_;
  Gauge& running_;
  Gauge& waiting_;
  Gauge& kv_used_;
  Gauge& kv_total_;
  Gauge& slots_used_;
  Gauge& slots_total_;
  Gauge& cache_checkpoints_;
  Gauge& cache_blocks_;
  Gauge& pinned_bytes_;
  Gauge& device_used_;
  Gauge& device_total_;
  Counter& requests_;
  Counter& prompt_tokens_;
  Counter& generation_tokens_;
  Counter& preemptions_;
  Counter& cache_queries_;
  Counter& cache_hits_;
  Counter& cache_hit_tokens_;
  Histogram& ttft_;
  Histogram& e2e_;
  Histogram& step_time_;
};

}  // namespace

std::unique_ptr<MetricSet> make_engine_metrics(prometheus::Registry& registry, int32_t engine, const std::string& device) {
  return std::make_unique<EngineMetrics>(registry, engine, device);
}

}  // namespace deltaserve::server
