// The run's report: settings, per-kind outcomes, errors by type, latency percentiles,
// per-stream and aggregate throughput (from the server's usage), and the soak's checks,
// rendered as a text table and as JSON. Pure; one thread.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadtest/leak_checks.h"
#include "loadtest/request_plan.h"

namespace deltaserve::loadtest {

struct Distribution {
  int64_t count = 0;
  double mean = 0.0, p50 = 0.0, p90 = 0.0, p99 = 0.0, max = 0.0;
};
// Percentiles by linear interpolation between closest ranks.
Distribution distribution(std::vector<double> values);

struct KindStats {
  int64_t issued = 0, ok = 0, failed = 0, cancelled = 0;
  std::map<unsigned, int64_t> statuses;            // 0 = no response
  std::map<std::string, int64_t> failure_reasons;  // why `failed`
};

struct RunSettings {
  std::string url, mode, loop, endpoint, model, mix;
  int32_t concurrency = 0;
  int64_t num_requests = 0;
  double rate_per_s = 0.0;
  uint64_t seed = 0;
  int32_t input_tokens = 0, output_tokens = 0;
  int64_t context_tokens = 0, num_state_slots = 0;
  int32_t num_warmup = 0, num_bursts = 0, burst_size = 0;
  bool continuous_usage = true;
};

struct RunReport {
  RunSettings settings;
  double duration_s = 0.0;  // main phase
  std::vector<std::pair<std::string, KindStats>> kinds;  // in RequestKind order
  std::map<std::string, int64_t> errors;                 // error_key -> count (all outcomes)
  Distribution ttft_ms, itl_ms, e2e_ms, stream_tokens_per_s;
  int64_t num_requests = 0, num_completed = 0, num_failed = 0, num_cancelled = 0;
  int64_t output_tokens = 0, prompt_tokens = 0;  // server usage, every request that reported it
  double output_tokens_per_s = 0.0, requests_per_s = 0.0, completed_per_s = 0.0;
  int64_t num_multi_token_chunks = 0;  // chunks carrying > 1 token (accepted drafts)
  int64_t connections_opened = 0;
  std::vector<Check> checks;
  std::vector<std::string> failure_examples;  // the first few, with kind and variant
  std::vector<std::string> notes;
  // Multi-turn token conversations: prompt tokens an ideal prefix cache reuses, and of them
  // those the server reported cached (0 and 0 otherwise).
  int64_t reusable_prompt_tokens = 0;
  int64_t reusable_cached_tokens = 0;
  bool deadline_hit = false;
  bool passed = true;
};

// Fills the outcome part of `report` from the main phase's results (warmup excluded).
void summarize(const std::vector<RequestResult>& results, double duration_s, RunReport& report);

void print_report(std::ostream& out, const RunReport& report);
nlohmann::json report_json(const RunReport& report);

}  // namespace deltaserve::loadtest
