// Every option of `deltaserve serve` in one typed struct. Sources, later ones winning:
// built-in defaults < the JSON file given by --config < command-line flags. The JSON keys
// are the flag names with '_' for '-' (config/deltaserve.json lists all of them). Unknown
// keys, wrong types and out-of-range values are rejected at start with one line naming the
// option; after load_server_config() returns, the struct is const for the process' life.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/device_split.h"

namespace deltaserve::server {

struct ServerConfig {
  // Model and identity.
  std::string model;                // GGUF file or HF directory
  std::string served_model_name;    // "" = the model file's stem
  std::string chat_template;        // a Jinja file overriding the model's template; "" = model's
  std::string device = "auto";      // auto | cpu | cuda[:N] | hip[:N]
  // Several devices (runtime/device_split.h): e.g. cpu:0,cpu:1 or cuda:0,cuda:1; empty = --device.
  std::vector<std::string> devices;
  std::string split = "layers";     // what several devices do: layers | replicas
  std::string split_layers;         // layer split override: "0-19,20-39" or "20,20"; "" = balanced by memory

  // Listener.
  std::string host = "127.0.0.1";
  int32_t port = 8000;              // 0 = any free port (printed, and written to port_file)
  std::string port_file;            // write the bound port here once listening
  std::vector<std::string> api_keys;  // empty = no auth; else Bearer one of these on /v1/*
  std::string api_key_file;         // one key per line, added to api_keys
  int32_t http_threads = 0;         // 0 = min(4, cores)
  int64_t max_body_bytes = 8 << 20;
  int32_t max_json_depth = 128;     // nesting of a JSON body; deeper: 400 before it is built
  int64_t max_json_elements = 1 << 20;  // values in a JSON body; more: 400 before they are built
  int32_t keep_alive_timeout_s = 60;
  int32_t shutdown_grace_s = 30;    // SIGTERM: in-flight requests get this long to finish
  int64_t stream_queue_bytes = 4 << 20;  // unsent SSE bytes per stream before it is cut
  double sse_keepalive_s = 15.0;    // ": keep-alive" comment after this long without a chunk; 0 = off
  std::string cors_allow_origin;    // "" = no CORS headers
  std::vector<std::string> cors_allow_headers;  // preflight's allowed headers; empty = echo the request's
  int32_t retry_after_s = 1;        // Retry-After on 429 / 503

  // Request handling.
  int32_t default_max_tokens = 0;   // chat and responses; 0 = up to the context
  int32_t max_logprobs = 20;
  int32_t max_stop_strings = 16;
  bool reject_unknown_fields = true;
  bool accept_any_model_name = false;  // else a foreign "model" is a 404 (as vLLM)
  std::string reasoning_parser = "qwen3";  // qwen3 | none
  std::string reasoning_field = "reasoning_content";  // reasoning_content | reasoning | both
  bool force_include_usage = false;
  nlohmann::json default_chat_template_kwargs = nlohmann::json::object();
  // /v1/responses' store (previous_response_id, GET / DELETE /v1/responses/{id}; memory only,
  // lost on restart): at most this many responses and bytes, each kept this long after it
  // finished; the oldest go first. 0 = off.
  int32_t responses_store_entries = 1024;
  int32_t responses_store_ttl_s = 3600;
  int64_t responses_store_bytes = 64 << 20;  // all stored entries' JSON together

  // Engine limits (0 = auto: resolved from the model and memory at load).
  int32_t max_streams = 0;          // sequences running at once (= state slots)
  int32_t max_waiting = 256;        // queued requests beyond which submit answers 429
  int32_t context_tokens = 0;       // prompt + output per sequence
  int32_t max_batched_tokens = 2048;
  int32_t max_prefill_chunk_tokens = 512;
  int32_t kv_block_tokens = 16;
  int32_t kv_blocks = 0;
  int32_t draft_depth = -1;         // -1 = adaptive, 0 = speculation off
  std::string drafter = "mtp";      // where drafts come from: mtp | dflash | none
  std::string draft_model;          // --drafter dflash: the DFlash draft model directory (config.json + model.safetensors)
  std::string step_costs_file;      // the speculation policy's measured step costs, cached; empty = measured every start
  int32_t cpu_threads = 0;
  std::string state_precision = "f32";  // recurrent (delta) states: f32 | bf16 (GPU backend only)
  std::string matvec = "auto";           // Q4_0 decode matvec: auto | fma | tensor (runtime::DecodeMatvec)
  std::string gdn_prefill = "auto";      // GDN prefill rows: auto | recurrent | chunked (runtime::GdnPrefill)
  // Prefix cache (docs/prefix-cache.md).
  bool prefix_cache = true;
  int64_t prefix_cache_device_bytes = int64_t{1} << 30;  // recurrent-state checkpoints on the device
  int64_t prefix_cache_host_bytes = int64_t{4} << 30;    // ... spilled to page-locked host memory
  int32_t prefix_checkpoint_tokens = 2048;               // a checkpoint every N prefill tokens; 0 = only at prompt/request ends
  std::string gpu_step_graphs = "auto";  // auto | on | off (runtime::StepGraphMode)

  // Observability.
  bool vllm_metrics = false;        // also export vLLM's metric names
  double metrics_rate_window_s = 10.0;
  std::string log_level = "info";   // trace | debug | info | warn | error

  // Test-only (hidden flags, never in the JSON file).
  bool fake_engine = false;
  int32_t fake_step_us = 2000;
  int32_t fake_load_ms = 0;

  // Every file option (in --help order), for --dump-config; API keys redacted (kRedacted).
  nlohmann::ordered_json to_json() const;
};

// Exit statuses of `deltaserve serve` (listed in --help). Errors go to stderr, one line.
constexpr int kExitOk = 0;            // stopped by SIGTERM/SIGINT after draining
constexpr int kExitModelLoad = 1;     // the model could not be loaded (or checked before listening)
constexpr int kExitConfig = 2;        // bad flags, config file or option values
constexpr int kExitListen = 3;        // the address/port could not be bound
constexpr int kExitForcedBase = 128;  // a second SIGTERM/SIGINT during the drain: 128 + signal
constexpr const char* kExitCodesHelp =
    "Exit status: 0 stopped by SIGTERM/SIGINT after draining; 1 the model could not be loaded; "
    "2 invalid flags, config file or option values; 3 the address or port could not be bound; "
    "128+N a second signal N during the drain forced the exit (130 SIGINT, 143 SIGTERM). "
    "Fatal errors are written to stderr as one line; logs go to stderr, the listening address to stdout.";
// What --dump-config prints in place of each API key.
constexpr const char* kRedacted = "<redacted>";

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the command line asked for besides the options.
struct ServeInvocation {
  ServerConfig config;
  bool exit_now = false;  // --help or --dump-config printed; exit with `exit_code`
  int exit_code = 0;
};

// Parses argv (argv[0] = "serve"), reads --config, applies flags over it, validates.
// Throws ConfigError with a message naming the option; --help text goes to stdout.
ServeInvocation load_server_config(int argc, char** argv);

// Reads one JSON config document over `config` (unknown keys and bad types throw).
void apply_config_json(ServerConfig& config, const nlohmann::json& document,
                       const std::string& source);

// Throws ConfigError naming the first invalid option.
void validate_config(const ServerConfig& config);

// The --devices list joined and parsed (entries may themselves hold commas: the JSON file's
// "cpu:0,cpu:1"); empty when --devices is not given. Throws ConfigError.
std::vector<runtime::DeviceId> configured_devices(const ServerConfig& config);

}  // namespace deltaserve::server
