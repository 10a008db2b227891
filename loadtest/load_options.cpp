#include "loadtest/load_options.h"

#include <iostream>
#include <map>

#include <CLI/CLI.hpp>

namespace deltaserve::loadtest {

const char* endpoint_choice_name(EndpointChoice choice) {
  switch (choice) {
    case EndpointChoice::Chat: return "chat";
    case EndpointChoice::Completions: return "completions";
    case EndpointChoice::Mixed: return "mixed";
  }
  return "chat";
}

ParsedOptions parse_load_options(int argc, char** argv) {
  ParsedOptions parsed;
  LoadOptions& o = parsed.options;
  CLI::App app(
      "deltaserve-load: load generator and soak tool for an OpenAI-compatible server "
      "(deltaserve). Token counts come from the server's usage, never from counting chunks.");
  app.set_help_flag("-h,--help", "Print this help and exit");

  app.add_option("--url", o.url, "Server base URL (http://host:port)")->capture_default_str();
  app.add_option("--api-key", o.api_key, "Bearer key for /v1/* requests");
  app.add_option("--model", o.model, "Model name to request (default: the first of /v1/models)");

  app.add_option("-c,--concurrency", o.concurrency, "Clients in the closed loop; cap on requests "
                 "in flight in the open loop")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("-n,--requests", o.num_requests, "Requests to send (soak: the main phase, abuse "
                 "and bursts included)")->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->capture_default_str();
  app.add_option("--rate", o.rate_per_s, "Open loop: Poisson arrivals per second (0 = closed loop)")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  const std::map<std::string, EndpointChoice> endpoints = {
      {"chat", EndpointChoice::Chat}, {"completions", EndpointChoice::Completions},
      {"mixed", EndpointChoice::Mixed}};
  app.add_option("--endpoint", o.endpoint, "chat | completions | mixed")
      ->transform(CLI::CheckedTransformer(endpoints, CLI::ignore_case));
  const std::map<std::string, Workload> workloads = {
      {"plain", Workload::Plain}, {"multi-turn", Workload::MultiTurn}, {"shared-prefix", Workload::SharedPrefix}};
  app.add_option("--workload", o.workload,
                 "plain | multi-turn (each client one conversation of --turns turns, a user message of "
                 "--input-tokens each, the whole history resent: TTFT and cached tokens per turn) | "
                 "shared-prefix (every prompt starts with the same --shared-prefix-tokens tokens)")
      ->transform(CLI::CheckedTransformer(workloads, CLI::ignore_case));
  app.add_option("--turns", o.turns, "Multi-turn: turns per conversation (requests = concurrency x turns)")
      ->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--shared-prefix-tokens", o.shared_prefix_tokens, "Shared-prefix: tokens of the common prefix")
      ->check(CLI::Range(1, 1 << 22))->capture_default_str();
  app.add_option("--prompts", o.prompts_path, "JSONL prompts: one {\"prompt\": ...} or "
                 "{\"messages\": [...]} per line, optional \"max_tokens\" (else generated)");
  app.add_option("--input-tokens", o.input_tokens, "Generated prompts: about this many tokens")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--output-tokens,--max-tokens", o.output_tokens, "max_tokens of each request")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_flag("--ignore-eos", o.ignore_eos, "Ask the server to ignore EOS (vLLM extension)");
  app.add_option("--temperature", o.temperature, "Sampling temperature")
      ->check(CLI::Range(0.0, 2.0))->capture_default_str();
  app.add_option("--top-p", o.top_p, "Nucleus sampling's top_p (sent only below 1)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the tool's choices and of each request's sampling")
      ->capture_default_str();
  bool no_continuous = false;
  app.add_flag("--no-continuous-usage", no_continuous, "Do not ask for usage in every chunk "
               "(then inter-token latency is per request: (last - first) / (tokens - 1))");

  app.add_flag("--soak", o.soak, "Soak: mix normal requests with disconnects, slow readers and "
               "invalid input; check /metrics (and /proc with --server-pid) for leaks");
  app.add_option("--server-pid", o.server_pid, "Server process id: RSS and open sockets from /proc");
  app.add_option("--server-max-waiting", o.server_max_waiting, "The server's --max-waiting (bursts "
                 "exceed slots + this)")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--server-max-body-bytes", o.server_max_body_bytes, "The server's --max-body-bytes "
                 "(oversize bodies exceed it)")->check(CLI::Range(int64_t{1}, int64_t{1} << 32))->capture_default_str();
  app.add_option("--warmup", o.warmup_requests, "Soak: normal requests before the 'before' "
                 "snapshot (-1 = 2 per client, at least 8)")->check(CLI::Range(-1, 1 << 24));
  app.add_option("--bursts", o.num_bursts, "Soak: bursts over the queue limit")
      ->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("--burst-size", o.burst_size, "Soak: requests per burst (0 = 2 x (slots + "
                 "max-waiting) + 4)")->check(CLI::Range(0, 100000));
  app.add_option("--rss-growth-bound-mib", o.rss_growth_bound_mib, "Soak: allowed growth of the "
                 "server's RSS from after the warmup to the end")->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--settle-timeout-s", o.settle_timeout_s, "Soak: how long the server may take to "
                 "return to idle after the run")->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--mix", o.mix, "Soak: weights 'kind=w,kind=w' over the defaults (see README)");

  app.add_option("--plot", o.plot_dir, "Write time series and PNG charts (gnuplot) to DIR");
  app.add_option("--json", o.json_path, "Write the report as JSON to FILE ('-' = stdout)");
  app.add_option("--sample-interval-s", o.sample_interval_s, "Time series step")
      ->check(CLI::Range(0.05, 3600.0))->capture_default_str();
  app.add_flag("-q,--quiet", o.quiet, "No progress lines on stderr");

  app.add_option("--connect-timeout-s", o.connect_timeout_s)->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  app.add_option("--idle-timeout-s", o.idle_timeout_s, "Longest silence from the server within a "
                 "response")->check(CLI::Range(0.01, 86400.0))->capture_default_str();
  app.add_option("--request-timeout-s", o.request_timeout_s, "Longest single request")
      ->check(CLI::Range(0.01, 86400.0))->capture_default_str();
  app.add_option("--max-duration-s", o.max_duration_s, "Longest run; then every socket is closed "
                 "and the run fails")->check(CLI::Range(1.0, 86400.0 * 30))->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parsed.exit_now = true;
    parsed.exit_code = app.exit(e, std::cout, std::cerr);
    if (parsed.exit_code != 0) parsed.exit_code = 2;
    return parsed;
  }
  o.continuous_usage = !no_continuous;
  return parsed;
}

}  // namespace deltaserve::loadtest
