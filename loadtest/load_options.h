// Command line of deltaserve-load, parsed once into a const struct (CLI11).
//
//   deltaserve-load --url http://127.0.0.1:8000 --concurrency 8 --requests 500
//                   [--rate 4] [--soak] [--plot DIR] [--json FILE] ...
//
// Load mode measures: closed loop (N clients, each sends its next request when the last
// one ended) or, with --rate, open loop (Poisson arrivals at R/s, at most N in flight).
// Soak mode adds the abuse mix and the leak checks (see soak_mix.h, leak_checks.h).
#pragma once

#include <cstdint>
#include <string>

namespace deltaserve::loadtest {

enum class EndpointChoice { Chat, Completions, Mixed };

// What the well-formed requests look like (load mode).
//  Plain: independent prompts.
//  MultiTurn: each client holds one conversation of --turns turns: every turn adds a user
//    message of about --input-tokens tokens to the whole history plus the previous answer
//    (chat, so the server's chat template renders it); --concurrency conversations interleave.
//    The report gives TTFT and cached prompt tokens per turn (prefix cache, docs/prefix-cache.md).
//  SharedPrefix: every prompt starts with one common text of --shared-prefix-tokens tokens.
enum class Workload { Plain, MultiTurn, SharedPrefix };

struct LoadOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;  // "" = the first model /v1/models lists

  // Shape of the load.
  int32_t concurrency = 4;
  int64_t num_requests = 100;
  double rate_per_s = 0.0;  // 0 = closed loop
  EndpointChoice endpoint = EndpointChoice::Chat;
  std::string prompts_path;  // JSONL: {"prompt": ...} or {"messages": [...]}, optional max_tokens
  int32_t input_tokens = 64;   // generated prompts: about this many prompt tokens
  int32_t output_tokens = 64;  // max_tokens of each request
  bool ignore_eos = false;     // vLLM extension: always generate max_tokens
  double temperature = 0.7;
  double top_p = 1.0;  // sent only below 1 (the servers' default)
  uint64_t seed = 1;
  bool continuous_usage = true;  // usage in every chunk: exact tokens per chunk for ITL
  Workload workload = Workload::Plain;
  int32_t turns = 10;                  // multi-turn: turns per conversation
  int32_t shared_prefix_tokens = 2048;  // shared-prefix: tokens of the common prefix

  // Soak.
  bool soak = false;
  int64_t server_pid = 0;          // read RSS and socket count from /proc/<pid>
  int32_t server_max_waiting = 256;    // the daemon's --max-waiting (sizes the bursts)
  int64_t server_max_body_bytes = 8 << 20;  // the daemon's --max-body-bytes
  int32_t warmup_requests = -1;    // -1 = auto (2 per client, at least 8)
  int32_t num_bursts = 3;
  int32_t burst_size = 0;          // 0 = auto: 2 x (slots + max_waiting) + 4
  double rss_growth_bound_mib = 64.0;
  double settle_timeout_s = 20.0;
  std::string mix;                 // "kind=weight,...": overrides soak weights

  // Output.
  std::string plot_dir;
  std::string json_path;  // "-" = stdout
  double sample_interval_s = 1.0;
  bool quiet = false;     // no progress lines on stderr

  // Timeouts: nothing waits longer than these.
  double connect_timeout_s = 10.0;
  double idle_timeout_s = 60.0;      // no byte from the server for this long
  double request_timeout_s = 300.0;  // one request, start to end
  double max_duration_s = 3600.0;    // the whole run; then every socket is closed
};

struct ParsedOptions {
  LoadOptions options;
  bool exit_now = false;  // --help printed, or an error (then exit_code != 0)
  int exit_code = 0;
};

ParsedOptions parse_load_options(int argc, char** argv);

const char* endpoint_choice_name(EndpointChoice choice);

}  // namespace deltaserve::loadtest
