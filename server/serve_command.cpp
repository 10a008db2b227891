// `deltaserve serve`: configuration, listener, model loading, and the shutdown sequence.
//
// Order of events: the model file is checked (it exists and its header or config parses)
// before anything listens, so a wrong --model fails at once without opening the port; then
// the listener binds (so /health answers and /ready says 503 while the weights load), the
// model loads on its own thread, then /ready turns 200. SIGTERM or SIGINT: stop accepting,
// /ready 503, new requests 503; in-flight requests get --shutdown-grace-s to finish; the
// rest are cancelled (their streams end with an error event); exit 0. A second SIGTERM or
// SIGINT during the drain exits at once with 128 + the signal's number.
//
// Logs go to stderr; fatal errors are one line there, and the exit statuses are listed in
// `serve --help` (server_config.h). stdout carries only the "listening on" line.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <boost/system/system_error.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/model_loader.h"
#include "server/server_config.h"
#include "server/server_state.h"

namespace deltaserve::cli {
namespace {

using server::ServerConfig;

std::string model_name_of(const ServerConfig& config) {
  if (!config.served_model_name.empty()) return config.served_model_name;
  if (config.model.empty()) return "deltaserve-fake";
  std::filesystem::path path(config.model);
  if (path.filename().empty()) path = path.parent_path();
  return path.stem().string();
}

std::string mib(int64_t bytes) { return std::to_string(bytes / (1 << 20)) + " MiB"; }

void log_limits(const server::EngineLimits& l) {
  spdlog::info("limits: {} streams at once, {} waiting before 429, context {} tokens, device {}",
               l.max_streams, l.max_waiting, l.context_tokens, l.device);
  spdlog::info("memory: KV cache {} blocks x {} tokens = {} ({} tokens), state slots {}, drafts up to {}",
               l.num_kv_blocks, l.kv_block_tokens, mib(l.kv_bytes),
               int64_t{l.num_kv_blocks} * l.kv_block_tokens, mib(l.state_bytes), l.max_draft_depth);
}

void write_port_file(const std::string& path, uint16_t port) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
  }
  std::filesystem::rename(tmp, path);  // readers never see a half-written file
}

// One line on stderr for an error that ends the process.
void fatal_line(const std::string& what) { std::fprintf(stderr, "deltaserve serve: %s\n", what.c_str()); }

// The second SIGTERM/SIGINT (the first one started the drain): exit at once.
void force_exit_on_second_signal(sigset_t signals) {
  std::thread([signals] {
    int signal_number = 0;
    if (sigwait(&signals, &signal_number) != 0) return;
    fatal_line("signal " + std::to_string(signal_number) + " during the drain: exiting now without waiting");
    std::fflush(stderr);
    std::_Exit(server::kExitForcedBase + signal_number);
  }).detach();
}

// Graceful shutdown: see the file comment.
void drain(const ServerConfig& config, server::ServerState& state, server::HttpServer& http,
           server::ServingEngine* engine) {
  state.begin_drain();
  if (engine) {
    engine->begin_drain();
    const auto grace = std::chrono::seconds(config.shutdown_grace_s);
    spdlog::info("draining: {} generation(s) in flight, grace {} s", state.num_active_generations(),
                 config.shutdown_grace_s);
    if (!engine->wait_idle(grace)) {
      const scheduler::EngineStats s = engine->stats();
      spdlog::warn("grace period over: cancelling {} running and {} waiting request(s)",
                   s.num_running, s.num_waiting);
      engine->cancel_all();
      engine->wait_idle(std::chrono::seconds(5));
    }
  }
  // Let the sessions write the final bytes of what just ended.
  const auto flush_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (state.num_active_generations() > 0 && std::chrono::steady_clock::now() < flush_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http.stop_accepting();
  http.stop();
}

}  // namespace

int serve_main(int argc, char** argv) {
  server::ServeInvocation invocation;
  try {
    invocation = server::load_server_config(argc, argv);
  } catch (const server::ConfigError& e) {
    fatal_line(e.what());
    return server::kExitConfig;
  }
  if (invocation.exit_now) return invocation.exit_code;
  const ServerConfig& config = invocation.config;
  if (!spdlog::get("deltaserve")) spdlog::set_default_logger(spdlog::stderr_color_mt("deltaserve"));
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  if (!config.fake_engine) {
    try {
      server::check_model_files(config);
    } catch (const std::exception& e) {
      fatal_line(std::string("cannot load the model: ") + e.what());
      return server::kExitModelLoad;
    }
  }

  // Signals are taken by sigwait() below; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string model_name = model_name_of(config);
  // --split replicas over several devices: one engine per device behind a router.
  std::vector<std::string> device_names;
  for (const runtime::DeviceId& d : server::configured_devices(config)) device_names.push_back(runtime::device_name(d));
  const bool replicas = device_names.size() > 1 && config.split == "replicas";
  server::ServerMetrics metrics({model_name, config.vllm_metrics, config.metrics_rate_window_s,
                                 replicas ? device_names : std::vector<std::string>{}});
  server::ServerState state(config, metrics, model_name);
  std::unique_ptr<server::HttpServer> http;
  try {
    http = std::make_unique<server::HttpServer>(state, config.host, static_cast<uint16_t>(config.port));
  } catch (const boost::system::system_error& e) {
    // The code's message only: what() appends Boost's source location.
    fatal_line("cannot listen on " + config.host + ":" + std::to_string(config.port) + ": " + e.code().message());
    return server::kExitListen;
  } catch (const std::exception& e) {
    fatal_line("cannot listen on " + config.host + ":" + std::to_string(config.port) + ": " + e.what());
    return server::kExitListen;
  }
  const int num_threads = config.http_threads > 0
                              ? config.http_threads
                              : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  http->start(num_threads);
  write_port_file(config.port_file, http->port());
  std::cout << "deltaserve listening on http://" << config.host << ":" << http->port() << std::endl;
  spdlog::info("serving '{}' on {}:{} with {} I/O threads; /ready answers 503 until the model is loaded",
               model_name, config.host, http->port(), num_threads);

  server::LoadedModel model;
  server::ModelService service;
  std::atomic<bool> load_failed{false};
  std::thread loader([&] {
    try {
      if (replicas) {
        model = server::load_replicas(config, [&](int32_t i) { return metrics.engine_observer(i); }, &metrics);
      } else {
        model = config.fake_engine ? server::load_fake_model(config, &metrics)
                                   : server::load_model(config, &metrics);
      }
      if (config.fake_load_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(config.fake_load_ms));
      metrics.set_limits(model.limits, model.replica_limits);
      log_limits(model.limits);
      service.engine = model.engine.get();
      service.codec = model.codec.get();
      service.limits = model.limits;
      state.publish(&service);
      spdlog::info("ready");
    } catch (const std::exception& e) {
      fatal_line(std::string("cannot load the model: ") + e.what());
      load_failed = true;
      kill(getpid(), SIGTERM);
    }
  });

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  if (!load_failed) spdlog::info("signal {}: shutting down (a second signal exits at once)", signal_number);
  force_exit_on_second_signal(signals);
  loader.join();
  drain(config, state, *http, state.service() ? service.engine : nullptr);
  model = server::LoadedModel();  // engine first: its last events post to the stopped I/O context
  http.reset();
  spdlog::info("stopped");
  return load_failed ? server::kExitModelLoad : server::kExitOk;
}

}  // namespace deltaserve::cli
