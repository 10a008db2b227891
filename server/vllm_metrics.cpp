// The same observations under vLLM v1's metric names and labels (model_name, engine), so
// vLLM's Grafana dashboards, `vllm bench serve`, AIPerf and guidellm read deltaserve as they
// read vLLM. Differences that cannot be hidden: our inter-token latency is per token (vLLM's
// is per engine iteration), and prompt tokens are counted at request end.
#include <algorithm>
#include <vector>

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

class VllmMetrics final : public MetricSet {
 public:
  VllmMetrics(prometheus::Registry& r, const std::string& model_name, const std::string& engine)
      : registry_(r), labels_{{"model_name", model_name}, {"engine", engine}},
        running_(gauge("vllm:num_requests_running", "Number of requests in model execution batches.")),
        waiting_(gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")),
        kv_usage_(gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")),
        preemptions_(counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")),
        cache_queries_(counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")),
        cache_hits_(counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")),
        prompt_tokens_(counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")),
        generation_tokens_(counter("vllm:generation_tokens_total", "Number of generation tokens processed.")),
        success_family_(BuildCounter()
                            .Name("vllm:request_success_total")
                            .Help("Count of successfully processed requests.")
                            .Register(r)),
        ttft_(histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        ttft_buckets())),
        itl_(histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                       inter_token_buckets())),
        tpot_(histogram("vllm:request_time_per_output_token_seconds",
                        "Histogram of time_per_output_token_seconds per request.", inter_token_buckets())),
        e2e_(histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                       request_latency_buckets())),
        queue_(histogram("vllm:request_queue_time_seconds",
                         "Histogram of time spent in WAITING phase for request.", request_latency_buckets())),
        iteration_tokens_(histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                    rows_per_step_buckets())),
        drafts_(counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.")),
        draft_tokens_(counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.")),
        accepted_tokens_(counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.")),
        accepted_per_pos_family_(BuildCounter()
                                     .Name("vllm:spec_decode_num_accepted_tokens_per_pos_total")
                                     .Help("Accepted tokens per draft position.")
                                     .Register(r)) {
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      success_family_.Add(with({"finished_reason", reason}));
    }
  }

  void set_limits(const EngineLimits& limits) override {
    const int64_t max_tokens = std::max(limits.context_tokens, 1);
    prompt_len_ = &BuildHistogram()
                       .Name("vllm:request_prompt_tokens")
                       .Help("Number of prefill tokens processed.")
                       .Register(registry_)
                       .Add(labels_, token_count_buckets(max_tokens));
    generation_len_ = &BuildHistogram()
                           .Name("vllm:request_generation_tokens")
                           .Help("Number of generation tokens processed.")
                           .Register(registry_)
                           .Add(labels_, token_count_buckets(max_tokens));
    for (int32_t pos = 0; pos < limits.max_draft_depth; ++pos) {
      accepted_per_pos_.push_back(&accepted_per_pos_family_.Add(with({"position", std::to_string(pos)})));
    }
    limits_ = limits;
  }

  void step(const scheduler::StepReport& s) override {
    iteration_tokens_.Observe(s.num_rows);
    generation_tokens_.Increment(s.num_generated_tokens);
  }

  void inter_token(double gap_s) override { itl_.Observe(gap_s); }

  void request_finished(const scheduler::RequestReport& r) override {
    prompt_tokens_.Increment(r.num_prompt_tokens);
    e2e_.Observe(r.e2e_ms / 1000.0);
    if (r.num_generated_tokens > 0) {
      ttft_.Observe(r.ttft_ms / 1000.0);
      queue_.Observe(r.queue_ms / 1000.0);
    }
    if (r.num_generated_tokens > 1 && r.decode_tokens_per_s > 0.0) tpot_.Observe(1.0 / r.decode_tokens_per_s);
    if (prompt_len_) prompt_len_->Observe(r.num_prompt_tokens);
    if (generation_len_) generation_len_->Observe(r.num_generated_tokens);
  }

  void drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) override {
    if (position == 0) drafts_.Increment(num_drafted);
    draft_tokens_.Increment(num_drafted);
    accepted_tokens_.Increment(num_accepted);
    if (position >= 0 && position < static_cast<int32_t>(accepted_per_pos_.size())) {
      accepted_per_pos_[position]->Increment(num_accepted);
    }
  }

  void response_finished(ResponseEnd end) override {
    success_family_.Add(with({"finished_reason", response_end_name(end)})).Increment();
  }

  void refresh(const scheduler::EngineStats& s, const scheduler::EngineStats& delta, double) override {
    running_.Set(s.num_running);
    waiting_.Set(s.num_waiting);
    kv_usage_.Set(s.num_kv_blocks_total > 0
                      ? static_cast<double>(s.num_kv_blocks_used) / s.num_kv_blocks_total
                      : 0.0);
    preemptions_.Increment(static_cast<double>(delta.num_preemptions));
    cache_queries_.Increment(static_cast<double>(delta.prefix_cache_query_tokens));
    cache_hits_.Increment(static_cast<double>(delta.prefix_cache_hit_tokens));
  }

 private:
  prometheus::Labels with(std::pair<std::string, std::string> extra) const {
    prometheus::Labels labels = labels_;
    labels.insert(std::move(extra));
    return labels;
  }
  Gauge& gauge(const std::string& name, const std::string& help) {
    return BuildGauge().Name(name).Help(help).Register(registry_).Add(labels_);
  }
  Counter& counter(const std::string& name, const std::string& help) {
    return BuildCounter().Name(name).Help(help).Register(registry_).Add(labels_);
  }
  Histogram& histogram(const std::string& name, const std::string& help,
                       const Histogram::BucketBoundaries& buckets) {
    return BuildHistogram().Name(name).Help(help).Register(registry_).Add(labels_, buckets);
  }

  prometheus::Registry& registry_;
  const prometheus::Labels labels_;
  Gauge& running_;
  Gauge& waiting_;
  Gauge& kv_usage_;
  Counter& preemptions_;
  Counter& cache_queries_;
  Counter& cache_hits_;
  Counter& prompt_tokens_;
  Counter& generation_tokens_;
  prometheus::Family<Counter>& success_family_;
  Histogram& ttft_;
  Histogram& itl_;
  Histogram& tpot_;
  Histogram& e2e_;
  Histogram& queue_;
  Histogram& iteration_tokens_;
  Counter& drafts_;
  Counter& draft_tokens_;
  Counter& accepted_tokens_;
  prometheus::Family<Counter>& accepted_per_pos_family_;
  std::vector<Counter*> accepted_per_pos_;
  Histogram* prompt_len_ = nullptr;
  Histogram* generation_len_ = nullptr;
  EngineLimits limits_;
};

}  // namespace

std::unique_ptr<MetricSet> make_vllm_metrics(prometheus::Registry& registry,
                                             const std::string& model_name, const std::string& engine) {
  return std::make_unique<VllmMetrics>(registry, model_name, engine);
}

}  // namespace deltaserve::server
