#include "loadtest/load_driver.h"

#include <algorithm>
#include <iostream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "loadtest/json_read.h"

namespace deltaserve::loadtest {
namespace {

using nlohmann::json;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Exceptions must not escape a spawned coroutine silently: report and stop the run.
auto report_exception(const char* what) {
  return [what](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "deltaserve-load: " << what << " failed: " << ex.what() << "\n";
    }
    std::abort();
  };
}

}  // namespace

LoadDriver::LoadDriver(const LoadOptions& options, ServerUrl url)
    : options_(options), url_(url), pool_(io_.get_executor(), std::move(url)), rng_(options.seed) {
  runner_.options = &options_;
  runner_.pool = &pool_;
  runner_.run_start = Clock::now();
  runner_.on_tokens = [this](Clock::time_point, int64_t n) { tokens_since_sample_ += n; };
}

int LoadDriver::run() {
  net::co_spawn(io_, main_task(), report_exception("the run"));
  io_.run();
  if (!preflight_ok_) return 3;
  write_outputs();
  return report_.passed ? 0 : 1;
}

net::awaitable<void> LoadDriver::main_task() {
  watchdog_timer_.emplace(io_.get_executor());
  net::co_spawn(io_, watchdog(), report_exception("the watchdog"));
  preflight_ok_ = co_await preflight();
  if (!preflight_ok_) {
    watchdog_timer_->cancel();
    co_return;
  }
  ServerSnapshot before;
  if (options_.soak) {
    num_warmup_ = options_.warmup_requests >= 0 ? options_.warmup_requests
                                                : std::max(8, 2 * options_.concurrency);
    if (!options_.quiet) std::cerr << "deltaserve-load: warmup, " << num_warmup_ << " requests\n";
    co_await run_phase(num_warmup_, /*warmup=*/true);
    pool_.close_idle();
    before = co_await settle_idle();
  }
  sampling_ = true;
  net::co_spawn(io_, sampler(), report_exception("the sampler"));
  phase_start_ = last_progress_ = Clock::now();
  co_await run_phase(options_.num_requests, /*warmup=*/false);
  const double duration_s = std::chrono::duration<double>(Clock::now() - phase_start_).count();
  sampling_ = false;
  pool_.close_idle();
  progress(true);
  if (options_.soak && !stopping_) {
    co_await settle_and_check(before);
    co_await liveness_checks();
  }
  watchdog_timer_->cancel();
  build_report(duration_s);
  add_turn_report();
}

net::awaitable<bool> LoadDriver::preflight() {
  const auto timeout = seconds(options_.connect_timeout_s + options_.idle_timeout_s);
  const HttpCallResult models = co_await http_call(url_, "GET", "/v1/models", "", options_.api_key, timeout);
  const json list = json::parse(models.body, nullptr, false);
  if (models.status != 200 || !list.is_object() || !list.contains("data") || !list["data"].is_array() ||
      list["data"].empty()) {
    std::cerr << "deltaserve-load: GET /v1/models failed ("
              << (models.status ? "status " + std::to_string(models.status) : models.error) << ")\n";
    co_return false;
  }
  const json& card = list["data"][0];
  facts_.model = options_.model.empty() ? json_string(card, "id") : options_.model;
  facts_.context_tokens = json_int(card, "max_model_len");
  facts_.base_path = url_.base_path;
  const MetricsSample metrics = co_await scrape_metrics(url_, timeout);
  // The pool size gauge was named *_total before it became *_capacity; read either.
  facts_.num_state_slots = static_cast<int64_t>(metrics.get("deltaserve_state_slots_capacity")
                                                    .value_or(metrics.get("deltaserve_state_slots_total").value_or(0.0)));

  prompts_.emplace(options_, facts_.model);
  std::string words;
  for (const std::string& w : prompt_words()) words += (words.empty() ? "" : " ") + w;
  std::string tokenize_body = json{{"prompt", words}}.dump();  // not inside co_await: g++ 12
  const HttpCallResult tok = co_await http_call(url_, "POST", "/tokenize", std::move(tokenize_body),
                                                options_.api_key, timeout);
  const json tokens = json::parse(tok.body, nullptr, false);
  if (tok.status == 200 && tokens.is_object() && tokens.contains("tokens") && tokens["tokens"].is_array()) {
    for (const json& id : tokens["tokens"]) {
      if (id.is_number_integer()) facts_.sample_token_ids.push_back(id.get<int32_t>());
    }
    prompts_->set_tokens_per_word(static_cast<double>(facts_.sample_token_ids.size()) /
                                  static_cast<double>(prompt_words().size()));
  }
  if (options_.soak) {
    mix_.emplace(options_, *prompts_, facts_);
    burst_size_ = options_.burst_size > 0
                      ? options_.burst_size
                      : static_cast<int32_t>(2 * (facts_.num_state_slots + options_.server_max_waiting) + 4);
  }
  co_return true;
}

net::awaitable<void> LoadDriver::run_phase(int64_t num_requests, bool warmup) {
  next_index_ = phase_end_ = (warmup ? 0 : num_warmup_);
  phase_end_ += num_requests;
  burst_points_.clear();
  next_burst_ = 0;
  if (options_.soak && !warmup) {
    for (int32_t b = 1; b <= options_.num_bursts; ++b) {
      burst_points_.push_back(next_index_ + num_requests * b / (options_.num_bursts + 1));
    }
  }
  if (options_.rate_per_s > 0.0 && !warmup) {
    co_await open_loop(warmup);
    co_return;
  }
  WaitGroup clients(io_.get_executor());
  for (int32_t i = 0; i < options_.concurrency; ++i) {
    clients.add();
    if (options_.workload == Workload::MultiTurn && !options_.soak && !warmup) {
      net::co_spawn(io_, conversation_client(i, clients), report_exception("a conversation"));
    } else {
      net::co_spawn(io_, closed_loop_client(warmup, clients), report_exception("a client"));
    }
  }
  co_await clients.wait();
}

std::optional<int32_t> LoadDriver::take_burst(int64_t index) {
  if (next_burst_ >= burst_points_.size() || index < burst_points_[next_burst_]) return std::nullopt;
  ++next_burst_;
  const int32_t size = static_cast<int32_t>(std::min<int64_t>(burst_size_, phase_end_ - index));
  next_index_ = index + size;  // the burst's requests use these indices
  return size;
}

RequestPlan LoadDriver::next_plan(int64_t index, bool warmup) {
  if (!options_.soak) return prompts_->normal_plan(index, rng_, /*stream=*/true);
  if (warmup) return mix_->make(RequestKind::ChatStream, index, rng_);
  return mix_->make(mix_->pick(rng_), index, rng_);
}

net::awaitable<void> LoadDriver::closed_loop_client(bool warmup, WaitGroup& clients) {
  while (!stopping_ && next_index_ < phase_end_) {
    const int64_t index = next_index_++;
    if (!warmup) {
      if (const std::optional<int32_t> size = take_burst(index)) {
        co_await burst(index, *size, nullptr);
        continue;
      }
    }
    co_await one_request(next_plan(index, warmup), warmup, nullptr);
  }
  clients.done();
}

net::awaitable<void> LoadDriver::open_loop(bool warmup) {
  WaitGroup requests(io_.get_executor());
  std::exponential_distribution<double> gap_s(options_.rate_per_s);
  Clock::time_point arrival = Clock::now();
  while (!stopping_ && next_index_ < phase_end_) {
    arrival += seconds(gap_s(rng_));
    if (arrival > Clock::now()) co_await sleep_for(arrival - Clock::now());
    while (!stopping_ && num_in_flight_ >= options_.concurrency) co_await finished_signal_.wait();
    if (stopping_) break;
    const int64_t index = next_index_++;
    if (const std::optional<int32_t> size = take_burst(index)) {
      requests.add();
      net::co_spawn(io_, burst(index, *size, &requests), report_exception("a burst"));
      continue;
    }
    requests.add();
    net::co_spawn(io_, one_request(next_plan(index, warmup), warmup, &requests), report_exception("a request"));
  }
  co_await requests.wait();
}

net::awaitable<void> LoadDriver::burst(int64_t first_index, int32_t size, WaitGroup* group) {
  ++num_bursts_in_flight_;  // pressure (429s are earned) until the burst's last request ended
  WaitGroup mine(io_.get_executor());
  for (int32_t i = 0; i < size; ++i) {
    mine.add();
    net::co_spawn(io_, one_request(mix_->make(RequestKind::Burst, first_index + i, rng_), false, &mine),
                  report_exception("a burst request"));
  }
  co_await mine.wait();
  --num_bursts_in_flight_;
  if (group) group->done();
}

bool LoadDriver::pressure() const {
  return num_bursts_in_flight_ > 0 ||
         num_in_flight_ > facts_.num_state_slots + options_.server_max_waiting;
}

net::awaitable<void> LoadDriver::one_request(RequestPlan plan, bool warmup, WaitGroup* group, int32_t turn,
                                             Answer* answer) {
  ++num_in_flight_;
  RequestResult result = co_await run_request(runner_, plan);
  result.reusable_prompt_tokens = plan.reusable_prompt_tokens;
  result.warmup = warmup;
  result.turn = turn;
  judge_result(plan, result, pressure());
  if (answer != nullptr) {
    answer->text = result.content;
    answer->prompt_token_ids = result.prompt_token_ids;
    answer->output_token_ids = result.output_token_ids;
    answer->ok = result.failure.empty() && result.status == 200;
  }
  note_connect_result(result);
  --num_in_flight_;
  ++num_finished_;
  results_.push_back(std::move(result));
  finished_signal_.notify();
  if (group) group->done();
  if (!warmup) progress(false);
}

// A server that refuses every connection is gone: stop instead of failing every request.
void LoadDriver::note_connect_result(const RequestResult& result) {
  constexpr int kMaxConsecutiveConnectFailures = 20;
  const bool failed = result.transport_error.rfind("connect_", 0) == 0;
  num_connect_failures_in_row_ = failed ? num_connect_failures_in_row_ + 1 : 0;
  if (num_connect_failures_in_row_ < kMaxConsecutiveConnectFailures || stopping_) return;
  std::cerr << "deltaserve-load: " << kMaxConsecutiveConnectFailures
            << " connections in a row failed: stopping the run\n";
  report_.notes.push_back("the run stopped early: the server refused " +
                          std::to_string(kMaxConsecutiveConnectFailures) + " connections in a row");
  stopping_ = true;
  pool_.abort_all();
  finished_signal_.notify();
}

net::awaitable<void> LoadDriver::sleep_for(Clock::duration d) {
  net::steady_timer timer(io_.get_executor(), d);
  boost::system::error_code ignored;
  co_await timer.async_wait(net::redirect_error(net::use_awaitable, ignored));
}

net::awaitable<void> LoadDriver::sampler() {
  const Clock::time_point start = runner_.run_start;  // the axis of requests.dat too
  Clock::time_point last = Clock::now();
  tokens_since_sample_ = 0;
  while (sampling_ && !stopping_) {
    co_await sleep_for(seconds(options_.sample_interval_s));
    const Clock::time_point now = Clock::now();
    TimelineSample s;
    s.t_s = std::chrono::duration<double>(now - start).count();
    s.num_in_flight = num_in_flight_;
    s.num_finished = num_finished_;
    s.output_tokens_per_s = static_cast<double>(tokens_since_sample_) /
                            std::max(1e-6, std::chrono::duration<double>(now - last).count());
    tokens_since_sample_ = 0;
    last = now;
    const MetricsSample m = co_await scrape_metrics(url_, seconds(options_.idle_timeout_s));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const auto value = [&](const char* name) { return m.ok ? m.get(name).value_or(nan) : nan; };
    s.running = value("deltaserve_requests_running");
    s.waiting = value("deltaserve_requests_waiting");
    s.kv_blocks_used = value("deltaserve_kv_blocks_used");
    s.state_slots_used = value("deltaserve_state_slots_used");
    const ProcSample p = options_.server_pid > 0 ? read_proc(options_.server_pid) : ProcSample{};
    s.rss_mib = p.ok ? p.rss_mib : nan;
    timeline_.push_back(s);
  }
}

net::awaitable<void> LoadDriver::watchdog() {
  watchdog_timer_->expires_after(seconds(options_.max_duration_s));
  boost::system::error_code ec;
  co_await watchdog_timer_->async_wait(net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;  // cancelled: the run ended in time
  std::cerr << "deltaserve-load: --max-duration-s " << options_.max_duration_s
            << " s reached: closing every connection\n";
  stopping_ = true;
  report_.deadline_hit = true;
  pool_.abort_all();
  finished_signal_.notify();
}

void LoadDriver::progress(bool force) {
  if (options_.quiet) return;
  const Clock::time_point now = Clock::now();
  if (!force && now - last_progress_ < std::chrono::seconds(10)) return;
  last_progress_ = now;
  int64_t failed = 0;
  for (const RequestResult& r : results_) failed += (!r.warmup && !r.failure.empty()) ? 1 : 0;
  std::cerr << "deltaserve-load: " << std::chrono::duration<double>(now - phase_start_).count() << " s, "
            << (num_finished_ - num_warmup_) << "/" << options_.num_requests << " done, " << num_in_flight_
            << " in flight, " << failed << " failed\n";
}

}  // namespace deltaserve::loadtest
