// Runs a whole load or soak run on one I/O thread, as coroutines:
//
//   preflight   /v1/models (model, context), /metrics (state slots), /tokenize (tokens/word)
//   warmup      soak only: normal requests, then the idle "before" snapshot
//   main phase  closed loop: N clients each send the next request when theirs ended;
//               open loop (--rate): Poisson arrivals, at most N in flight.
//               Soak: kinds drawn from SoakMix; --bursts bursts of --burst-size requests
//               fired at once at evenly spaced points, to overflow the queue (429s).
//   settle      soak only: wait for the server to go idle, "after" snapshot, leak checks,
//               liveness (/health, /ready, one more request)
//   report      table (stdout), JSON (--json), charts (--plot)
//
// A sampler scrapes /metrics (and /proc) every --sample-interval-s during the main phase
// for the time series; a watchdog closes every socket at --max-duration-s, so the run
// always ends. Owner: main(); blocks in run() until the report is out.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "loadtest/async_gate.h"
#include "loadtest/connection_pool.h"
#include "loadtest/leak_checks.h"
#include "loadtest/load_options.h"
#include "loadtest/plot_writer.h"
#include "loadtest/prompt_source.h"
#include "loadtest/request_runner.h"
#include "loadtest/run_report.h"
#include "loadtest/soak_mix.h"

namespace deltaserve::loadtest {

class LoadDriver {
 public:
  LoadDriver(const LoadOptions& options, ServerUrl url);
  // Returns the exit code: 0 pass, 1 a failed check or request, 3 the server was not usable.
  int run();

 private:
  // load_driver.cpp: the phases.
  net::awaitable<void> main_task();
  net::awaitable<bool> preflight();
  net::awaitable<void> run_phase(int64_t num_requests, bool warmup);
  net::awaitable<void> closed_loop_client(bool warmup, WaitGroup& clients);
  net::awaitable<void> open_loop(bool warmup);
  net::awaitable<void> burst(int64_t first_index, int32_t size, WaitGroup* group);
  // turn, answer: the multi-turn workload's turn (-1: none) and where the answer goes (its
  // text, and the token ids the server reported when the body asked for them).
  struct Answer {
    std::string text;
    std::vector<int32_t> prompt_token_ids, output_token_ids;
    bool ok = false;  // the request completed as planned
  };
  net::awaitable<void> one_request(RequestPlan plan, bool warmup, WaitGroup* group, int32_t turn = -1,
                                   Answer* answer = nullptr);
  RequestPlan next_plan(int64_t index, bool warmup);
  std::optional<int32_t> take_burst(int64_t index);
  bool pressure() const;
  void note_connect_result(const RequestResult& result);
  net::awaitable<void> sampler();
  net::awaitable<void> watchdog();
  net::awaitable<void> sleep_for(Clock::duration d);

  // load_driver_soak.cpp: snapshots, settling, checks and the report.
  net::awaitable<ServerSnapshot> snapshot();
  net::awaitable<ServerSnapshot> settle_idle();
  net::awaitable<void> settle_and_check(const ServerSnapshot& before);
  net::awaitable<void> liveness_checks();
  void add_run_checks();
  void build_report(double duration_s);
  void write_outputs();

  // load_driver_workloads.cpp: the multi-turn workload.
  net::awaitable<void> conversation_client(int32_t client, WaitGroup& clients);
  net::awaitable<void> token_conversation_client(int32_t client, WaitGroup& clients);
  void add_turn_report();
  void progress(bool force);

  const LoadOptions& options_;
  ServerUrl url_;
  net::io_context io_{1};
  ConnectionPool pool_;
  RunnerContext runner_;
  std::mt19937_64 rng_;
  ServerFacts facts_;
  std::optional<PromptSource> prompts_;
  std::optional<SoakMix> mix_;

  // Phase state.
  int64_t next_index_ = 0;
  int64_t phase_end_ = 0;
  std::vector<int64_t> burst_points_;  // indices at which the next burst fires, ascending
  size_t next_burst_ = 0;
  int32_t burst_size_ = 0;
  int64_t num_warmup_ = 0;
  int64_t num_in_flight_ = 0;
  int64_t num_bursts_in_flight_ = 0;
  int64_t num_finished_ = 0;
  Signal finished_signal_{io_.get_executor()};
  int num_connect_failures_in_row_ = 0;
  bool stopping_ = false;  // the deadline passed or the server is gone: no new requests
  bool sampling_ = false;
  bool preflight_ok_ = false;
  Clock::time_point phase_start_;
  Clock::time_point last_progress_;

  // Outputs.
  std::vector<RequestResult> results_;
  std::vector<TimelineSample> timeline_;
  int64_t tokens_since_sample_ = 0;
  std::optional<net::steady_timer> watchdog_timer_;
  RunReport report_;
};

}  // namespace deltaserve::loadtest
