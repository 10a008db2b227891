// LoadDriver, second half: the soak's snapshots, settling, checks, and the report.
#include <fstream>
#include <iostream>

#include "loadtest/load_driver.h"

namespace deltaserve::loadtest {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(250);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

bool server_idle(const MetricsSample& m) {
  return m.ok && m.get("deltaserve_requests_running").value_or(0.0) == 0.0 &&
         m.get("deltaserve_requests_waiting").value_or(0.0) == 0.0;
}

bool well_formed(RequestKind kind) {
  return kind == RequestKind::ChatStream || kind == RequestKind::CompletionStream ||
         kind == RequestKind::NonStream || kind == RequestKind::SlowReader || kind == RequestKind::Burst;
}

}  // namespace

net::awaitable<ServerSnapshot> LoadDriver::snapshot() {
  ServerSnapshot s;
  // /proc first: the scrape's own connection must not be counted as an open socket.
  if (options_.server_pid > 0) s.proc = read_proc(options_.server_pid);
  s.metrics = co_await scrape_metrics(url_, seconds(options_.idle_timeout_s));
  s.client_open_connections = pool_.counters().num_open();
  co_return s;
}

// The idle baseline: no request running or waiting, and the socket count no longer falling
// (sessions the warmup closed finish their lingering close).
net::awaitable<ServerSnapshot> LoadDriver::settle_idle() {
  const Clock::time_point deadline = Clock::now() + seconds(options_.settle_timeout_s);
  ServerSnapshot previous = co_await snapshot();
  int num_stable = 0;
  while (!stopping_ && Clock::now() < deadline) {
    co_await sleep_for(kPollInterval);
    ServerSnapshot now = co_await snapshot();
    const bool stable = !now.proc.ok || now.proc.num_sockets >= previous.proc.num_sockets;
    num_stable = (server_idle(now.metrics) && stable) ? num_stable + 1 : 0;
    previous = std::move(now);
    if (num_stable >= 2) co_return previous;
  }
  report_.notes.push_back("the server did not settle before the run; the baseline may be high");
  co_return previous;
}

// Polls until every leak check passes or the settle timeout is over; the last poll counts.
net::awaitable<void> LoadDriver::settle_and_check(const ServerSnapshot& before) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + seconds(options_.settle_timeout_s);
  std::vector<Check> checks;
  while (true) {
    const ServerSnapshot after = co_await snapshot();
    checks = leak_checks(before, after, options_);
    if (all_pass(checks) || Clock::now() >= deadline || stopping_) break;
    co_await sleep_for(kPollInterval);
  }
  const double settle_s = std::chrono::duration<double>(Clock::now() - start).count();
  report_.notes.push_back("leak checks read " + std::to_string(settle_s).substr(0, 4) +
                          " s after the last request ended (bound --settle-timeout-s " +
                          std::to_string(static_cast<int>(options_.settle_timeout_s)) + ")");
  report_.checks.insert(report_.checks.end(), checks.begin(), checks.end());
}

net::awaitable<void> LoadDriver::liveness_checks() {
  const auto timeout = seconds(options_.connect_timeout_s + options_.idle_timeout_s);
  const HttpCallResult health = co_await http_call(url_, "GET", "/health", "", "", timeout);
  report_.checks.push_back(run_check("GET /health after the run", "status == 200", health.status,
                                     health.status == 200, health.error));
  const HttpCallResult ready = co_await http_call(url_, "GET", "/ready", "", "", timeout);
  report_.checks.push_back(run_check("GET /ready after the run", "status == 200", ready.status,
                                     ready.status == 200, ready.error));
  RequestPlan plan = mix_->make(RequestKind::ChatStream, phase_end_ + 1, rng_);
  plan.fresh_connection = true;
  RequestResult r = co_await run_request(runner_, plan);
  judge_result(plan, r, false);
  report_.checks.push_back(run_check("a request after the run", "completes with a finish_reason",
                                     r.status, r.failure.empty(), r.failure));
  pool_.close_idle();
}

void LoadDriver::add_run_checks() {
  int64_t warmup_failed = 0, unearned_5xx = 0, unfinished = 0, burst_429 = 0, burst_total = 0;
  for (const RequestResult& r : results_) {
    if (r.warmup && !r.failure.empty()) ++warmup_failed;
    if (r.status >= 500 || (r.status == 200 && !r.error_type.empty())) ++unearned_5xx;
    if (well_formed(r.kind) && r.status == 200 && !r.cancelled && r.finish_reason.empty()) ++unfinished;
    if (r.kind == RequestKind::Burst) {
      ++burst_total;
      burst_429 += r.status == 429 ? 1 : 0;
    }
  }
  auto& checks = report_.checks;
  checks.push_back(run_check("requests failed", "== 0", static_cast<double>(report_.num_failed),
                             report_.num_failed == 0, "every outcome must be what its kind allows"));
  checks.push_back(run_check("warmup requests failed", "== 0", static_cast<double>(warmup_failed),
                             warmup_failed == 0));
  checks.push_back(run_check("5xx or error events", "== 0", static_cast<double>(unearned_5xx),
                             unearned_5xx == 0, "no drain in a soak: no 5xx is earned"));
  checks.push_back(run_check("well-formed 200s without finish_reason", "== 0", static_cast<double>(unfinished),
                             unfinished == 0));
  const int64_t capacity = facts_.num_state_slots + options_.server_max_waiting;
  if (burst_total > 0 && burst_size_ > capacity) {
    checks.push_back(run_check("burst requests answered 429", "> 0", static_cast<double>(burst_429),
                               burst_429 > 0, "bursts of " + std::to_string(burst_size_) +
                                                  " over slots + max-waiting = " + std::to_string(capacity)));
  }
  checks.push_back(run_check("finished before --max-duration-s", "true", report_.deadline_hit ? 0 : 1,
                             !report_.deadline_hit));
}

void LoadDriver::build_report(double duration_s) {
  RunSettings& s = report_.settings;
  s.url = options_.url;
  s.mode = options_.soak ? "soak" : "load";
  s.loop = options_.rate_per_s > 0.0 ? "open" : "closed";
  s.endpoint = options_.soak ? "soak mix" : endpoint_choice_name(options_.endpoint);
  s.model = facts_.model;
  s.concurrency = options_.concurrency;
  s.num_requests = options_.num_requests;
  s.rate_per_s = options_.rate_per_s;
  s.seed = options_.seed;
  s.input_tokens = options_.input_tokens;
  s.output_tokens = options_.output_tokens;
  s.context_tokens = facts_.context_tokens;
  s.num_state_slots = facts_.num_state_slots;
  s.continuous_usage = options_.continuous_usage;
  if (mix_) {
    s.mix = mix_->describe();
    s.num_warmup = static_cast<int32_t>(num_warmup_);
    s.num_bursts = options_.num_bursts;
    s.burst_size = burst_size_;
  }
  summarize(results_, duration_s, report_);
  report_.connections_opened = pool_.counters().num_opened;
  if (options_.soak) {
    add_run_checks();
    report_.passed = all_pass(report_.checks);
    report_.notes.push_back("cancel_at_step closes the instant a chunk with several tokens lands (the "
                            "engine is then running its next step, a verify step while drafts are "
                            "accepted); the client cannot see steps, so this aims at, not proves, a "
                            "disconnect during verification");
    if (options_.server_pid <= 0) {
      report_.notes.push_back("without --server-pid the server's sockets, threads and RSS are not "
                              "checked: /metrics exports none of them (it does export open connections)");
    }
  } else {
    report_.passed = !report_.deadline_hit && report_.num_failed == 0 && report_.num_completed > 0;
  }
}

void LoadDriver::write_outputs() {
  if (!options_.plot_dir.empty()) {
    try {
      std::vector<std::string> messages;
      const auto files = write_plots(options_.plot_dir, timeline_, results_, messages);
      for (const std::string& m : messages) report_.notes.push_back(m);
      report_.notes.push_back("wrote " + std::to_string(files.size()) + " files to " + options_.plot_dir);
    } catch (const std::exception& e) {
      report_.notes.push_back(std::string("--plot: ") + e.what());
    }
  }
  print_report(std::cout, report_);
  if (options_.json_path.empty()) return;
  const std::string text = report_json(report_).dump(2);
  if (options_.json_path == "-") {
    std::cout << text << "\n";
    return;
  }
  std::ofstream out(options_.json_path);
  out << text << "\n";
  if (!out) std::cerr << "deltaserve-load: cannot write " << options_.json_path << "\n";
}

}  // namespace deltaserve::loadtest
