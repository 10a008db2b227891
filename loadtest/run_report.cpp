#include "loadtest/run_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace deltaserve::loadtest {
namespace {

using nlohmann::json;

constexpr size_t kMaxFailureExamples = 10;

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
}

void print_distribution(std::ostream& out, const char* name, const Distribution& d) {
  char line[160];
  std::snprintf(line, sizeof(line), "  %-28s %9.2f %9.2f %9.2f %9.2f %9.2f %8lld\n", name, d.p50, d.p90,
                d.p99, d.mean, d.max, static_cast<long long>(d.count));
  out << line;
}

void print_kinds(std::ostream& out, const RunReport& r) {
  out << "request mix (main phase):\n";
  char line[200];
  std::snprintf(line, sizeof(line), "  %-20s %8s %8s %8s %9s  %s\n", "kind", "issued", "ok", "failed",
                "cancelled", "statuses");
  out << line;
  for (const auto& [name, k] : r.kinds) {
    if (k.issued == 0) continue;
    std::string statuses;
    for (const auto& [status, n] : k.statuses) {
      statuses += (statuses.empty() ? "" : " ") + (status ? std::to_string(status) : std::string("none")) +
                  "x" + std::to_string(n);
    }
    std::snprintf(line, sizeof(line), "  %-20s %8lld %8lld %8lld %9lld  %s\n", name.c_str(),
                  static_cast<long long>(k.issued), static_cast<long long>(k.ok),
                  static_cast<long long>(k.failed), static_cast<long long>(k.cancelled), statuses.c_str());
    out << line;
  }
}

void print_checks(std::ostream& out, const RunReport& r) {
  if (r.checks.empty()) return;
  out << "checks (before -> after; rule):\n";
  char line[400];
  for (const Check& c : r.checks) {
    if (c.source == "run") {  // a value of the run, no before
      std::snprintf(line, sizeof(line), "  %s %-30s %12s    %-12.6g %s%s%s\n", check_status_name(c.status),
                    c.name.c_str(), "", c.after, c.rule.c_str(), c.note.empty() ? "" : "  ", c.note.c_str());
    } else if (c.status == CheckStatus::Skipped) {
      std::snprintf(line, sizeof(line), "  %s %-30s not checked: %s\n", check_status_name(c.status),
                    c.name.c_str(), c.note.c_str());
    } else {
      std::snprintf(line, sizeof(line), "  %s %-30s %12.6g -> %-12.6g %s%s%s\n", check_status_name(c.status),
                    c.name.c_str(), c.before, c.after, c.rule.c_str(), c.note.empty() ? "" : "  ",
                    c.note.c_str());
    }
    out << line;
  }
}

}  // namespace

Distribution distribution(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 0.50);
  d.p90 = percentile(values, 0.90);
  d.p99 = percentile(values, 0.99);
  d.max = values.back();
  return d;
}

void summarize(const std::vector<RequestResult>& results, double duration_s, RunReport& report) {
  std::vector<KindStats> kinds(kNumRequestKinds);
  std::vector<double> ttft, itl, e2e, rate;
  for (const RequestResult& r : results) {
    if (r.warmup) continue;
    KindStats& k = kinds[static_cast<size_t>(r.kind)];
    ++k.issued;
    ++k.statuses[r.status];
    ++report.num_requests;
    if (r.cancelled) {
      ++k.cancelled;
      ++report.num_cancelled;
    }
    if (r.failure.empty()) {
      ++k.ok;
    } else {
      ++k.failed;
      ++report.num_failed;
      ++k.failure_reasons[r.failure];
      if (report.failure_examples.size() < kMaxFailureExamples) {
        report.failure_examples.push_back(std::string(request_kind_name(r.kind)) + " [" + r.variant +
                                          "] at " + fmt("%.2f s", r.start_s) + ": " + r.failure);
      }
    }
    if (const std::string key = r.error_key(); !key.empty()) ++report.errors[key];
    if (r.has_usage) {
      report.output_tokens += r.completion_tokens;
      report.prompt_tokens += r.prompt_tokens;
    }
    report.num_multi_token_chunks += r.num_multi_token_chunks;
    const bool completed = r.status == 200 && !r.finish_reason.empty() && !r.cancelled && r.failure.empty();
    if (!completed) continue;
    ++report.num_completed;
    e2e.push_back(r.e2e_ms);
    if (r.stream && r.ttft_ms >= 0.0) ttft.push_back(r.ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (r.decode_tokens_per_s > 0.0) rate.push_back(r.decode_tokens_per_s);
  }
  for (int i = 0; i < kNumRequestKinds; ++i) {
    report.kinds.emplace_back(request_kind_name(static_cast<RequestKind>(i)), kinds[static_cast<size_t>(i)]);
  }
  report.ttft_ms = distribution(std::move(ttft));
  report.itl_ms = distribution(std::move(itl));
  report.e2e_ms = distribution(std::move(e2e));
  report.stream_tokens_per_s = distribution(std::move(rate));
  report.duration_s = duration_s;
  if (duration_s > 0.0) {
    report.output_tokens_per_s = static_cast<double>(report.output_tokens) / duration_s;
    report.requests_per_s = static_cast<double>(report.num_requests) / duration_s;
    report.completed_per_s = static_cast<double>(report.num_completed) / duration_s;
  }
}

void print_report(std::ostream& out, const RunReport& r) {
  const RunSettings& s = r.settings;
  out << "deltaserve-load " << s.mode << ": " << s.url << " model " << s.model << "\n";
  out << "  " << s.loop << " loop, concurrency " << s.concurrency;
  if (s.rate_per_s > 0.0) out << ", arrival rate " << fmt("%.2f", s.rate_per_s) << "/s";
  out << ", " << s.num_requests << " requests, endpoint " << s.endpoint << ", input ~" << s.input_tokens
      << " tokens, max_tokens " << s.output_tokens << ", seed " << s.seed << "\n";
  out << "  server: context " << s.context_tokens << " tokens, " << s.num_state_slots << " state slots\n";
  if (!s.mix.empty()) {
    out << "  soak mix: " << s.mix << "\n";
    out << "  warmup " << s.num_warmup << " requests; " << s.num_bursts << " bursts of " << s.burst_size
        << " requests\n";
  }
  print_kinds(out, r);
  out << "latency and rate (completed requests):     p50       p90       p99      mean       max    count\n";
  print_distribution(out, "time to first token (ms)", r.ttft_ms);
  print_distribution(out, "inter-token latency (ms)", r.itl_ms);
  print_distribution(out, "end to end (ms)", r.e2e_ms);
  print_distribution(out, "per-stream output tok/s", r.stream_tokens_per_s);
  out << "aggregate: " << r.num_requests << " requests in " << fmt("%.1f", r.duration_s) << " s = "
      << fmt("%.2f", r.requests_per_s) << " req/s (" << fmt("%.2f", r.completed_per_s) << " completed/s); "
      << r.output_tokens << " output tokens = " << fmt("%.1f", r.output_tokens_per_s)
      << " tok/s; " << r.prompt_tokens << " prompt tokens (server usage)\n";
  out << "  " << r.num_completed << " completed, " << r.num_cancelled << " cancelled by the client, "
      << r.num_failed << " failed; " << r.connections_opened << " connections opened; "
      << r.num_multi_token_chunks << " chunks carried more than one token (accepted drafts, or text"
      << " held back by the detokenizer)\n";
  out << "errors by type:" << (r.errors.empty() ? " none\n" : "\n");
  for (const auto& [key, n] : r.errors) out << "  " << key << ": " << n << "\n";
  if (!r.failure_examples.empty()) {
    out << "failures (first " << r.failure_examples.size() << "):\n";
    for (const std::string& f : r.failure_examples) out << "  " << f << "\n";
  }
  print_checks(out, r);
  for (const std::string& n : r.notes) out << "note: " << n << "\n";
  out << "result: " << (r.passed ? "PASS" : "FAIL") << (r.deadline_hit ? " (hit --max-duration-s)" : "") << "\n";
}

json report_json(const RunReport& r) {
  const RunSettings& s = r.settings;
  json kinds = json::object();
  for (const auto& [name, k] : r.kinds) {
    if (k.issued == 0) continue;
    json statuses = json::object();
    for (const auto& [status, n] : k.statuses) statuses[std::to_string(status)] = n;
    kinds[name] = {{"issued", k.issued}, {"ok", k.ok}, {"failed", k.failed}, {"cancelled", k.cancelled},
                   {"statuses", statuses}, {"failure_reasons", k.failure_reasons}};
  }
  json checks = json::array();
  for (const Check& c : r.checks) {
    checks.push_back({{"name", c.name}, {"source", c.source}, {"rule", c.rule}, {"before", c.before},
                      {"after", c.after}, {"status", check_status_name(c.status)}, {"note", c.note}});
  }
  return {
      {"settings", {{"url", s.url}, {"mode", s.mode}, {"loop", s.loop}, {"endpoint", s.endpoint},
                    {"model", s.model}, {"concurrency", s.concurrency}, {"requests", s.num_requests},
                    {"rate_per_s", s.rate_per_s}, {"seed", s.seed}, {"input_tokens", s.input_tokens},
                    {"output_tokens", s.output_tokens}, {"context_tokens", s.context_tokens},
                    {"state_slots", s.num_state_slots}, {"mix", s.mix}, {"warmup", s.num_warmup},
                    {"bursts", s.num_bursts}, {"burst_size", s.burst_size},
                    {"continuous_usage", s.continuous_usage}}},
      {"duration_s", r.duration_s},
      {"requests", r.num_requests}, {"completed", r.num_completed}, {"cancelled", r.num_cancelled},
      {"failed", r.num_failed},
      {"output_tokens", r.output_tokens}, {"prompt_tokens", r.prompt_tokens},
      {"output_tokens_per_s", r.output_tokens_per_s}, {"requests_per_s", r.requests_per_s},
      {"completed_per_s", r.completed_per_s}, {"multi_token_chunks", r.num_multi_token_chunks},
      {"connections_opened", r.connections_opened},
      {"ttft_ms", distribution_json(r.ttft_ms)}, {"itl_ms", distribution_json(r.itl_ms)},
      {"e2e_ms", distribution_json(r.e2e_ms)},
      {"stream_output_tokens_per_s", distribution_json(r.stream_tokens_per_s)},
      {"kinds", kinds}, {"errors", r.errors}, {"failure_examples", r.failure_examples},
      {"checks", checks}, {"notes", r.notes},
      {"prefix_cache",
       {{"reusable_prompt_tokens", r.reusable_prompt_tokens}, {"reusable_cached_tokens", r.reusable_cached_tokens}}},
      {"deadline_hit", r.deadline_hit},
      {"result", r.passed ? "PASS" : "FAIL"}};
}

}  // namespace deltaserve::loadtest
