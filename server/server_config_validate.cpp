// Range and consistency checks of ServerConfig: one message per problem, naming the flag
// (the JSON key is the same name with '_' for '-').
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "server/openai_schema.h"
#include "server/server_config.h"

namespace deltaserve::server {
namespace {

template <class T>
void check_range(const char* flag, T value, T min_value, T max_value) {
  if (value < min_value || value > max_value) {
    throw ConfigError(std::string(flag) + " must lie in " + std::to_string(min_value) + ".." +
                      std::to_string(max_value) + ", got " + std::to_string(value));
  }
}

void check_one_of(const char* flag, const std::string& value, const std::set<std::string>& allowed) {
  if (allowed.count(value)) return;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw ConfigError(std::string(flag) + " must be one of " + list + ", got '" + value + "'");
}

// --devices, --split and --split-layers (runtime/device_split.h): the shape of the list and of
// the ranges; ranges against the model's layer count are checked at load.
void validate_devices(const ServerConfig& c) {
  const std::vector<runtime::DeviceId> devices = configured_devices(c);
  const std::optional<runtime::SplitMode> mode = runtime::parse_split_mode(c.split);
  if (!mode) check_one_of("--split", c.split, {"layers", "replicas"});
  if (!devices.empty() && c.device != "auto")
    throw ConfigError("--device " + c.device + " and --devices " + runtime::device_name(devices.front()) +
                      ",...: give one of them (--devices replaces --device)");
  if (devices.size() >= 2 && mode == runtime::SplitMode::kLayers && devices.front().kind != runtime::DeviceKind::kCpu)
    throw ConfigError("--devices " + runtime::device_name(devices.front()) + ",... --split layers: a layer split over GPUs "
                      "is not implemented yet (the GPU backend cannot run a layer range yet; it waits for a host with "
                      "two GPUs); CPU devices (cpu:0,cpu:1) split today");
  if (!c.split_layers.empty() && devices.empty())
    throw ConfigError("--split-layers needs --devices (the devices the layer ranges go to)");
  if (!c.split_layers.empty() && mode != runtime::SplitMode::kLayers)
    throw ConfigError("--split-layers needs --split layers");
  try {
    (void)runtime::parse_layer_split(c.split_layers, devices.size());
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace

std::vector<runtime::DeviceId> configured_devices(const ServerConfig& config) {
  if (config.devices.empty()) return {};
  std::string joined;
  for (const std::string& entry : config.devices) joined += (joined.empty() ? "" : ",") + entry;
  try {
    return runtime::parse_device_list(joined);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

void validate_config(const ServerConfig& c) {
  if (c.model.empty() && !c.fake_engine) {
    throw ConfigError("no --model given and the embedded default model (models/deltaserve-tiny-moe.gguf) "
                      "was not found; pass --model FILE_OR_DIR");
  }
  if (c.host.empty()) throw ConfigError("--host must not be empty");
  check_range("--port", c.port, 0, 65535);
  for (const std::string& key : c.api_keys) {
    if (key.empty()) throw ConfigError("--api-key: an API key must not be empty");
    // --dump-config prints each key as kRedacted; a dump fed back as the config must not make
    // that public placeholder an accepted key.
    if (key == kRedacted)
      throw ConfigError(std::string("--api-key: '") + kRedacted + "' is the placeholder --dump-config prints, not a key; give the real keys");
  }
  check_range("--http-threads", c.http_threads, 0, 256);
  check_range<int64_t>("--max-body-bytes", c.max_body_bytes, 1024, int64_t{1} << 30);
  check_range("--max-json-depth", c.max_json_depth, 1, 100000);
  check_range<int64_t>("--max-json-elements", c.max_json_elements, 16, int64_t{1} << 30);
  for (const std::string& header : c.cors_allow_headers) {
    if (header.empty() || header.find_first_of("\r\n,") != std::string::npos) {
      throw ConfigError("--cors-allow-headers: '" + header + "' is not a header name");
    }
  }
  check_range("--keep-alive-timeout-s", c.keep_alive_timeout_s, 1, 86400);
  check_range("--shutdown-grace-s", c.shutdown_grace_s, 0, 86400);
  check_range<int64_t>("--stream-queue-bytes", c.stream_queue_bytes, 4096, int64_t{1} << 30);
  check_range("--retry-after-s", c.retry_after_s, 0, 3600);
  if (!(c.sse_keepalive_s >= 0.0 && c.sse_keepalive_s <= 3600.0)) {  // NaN fails too
    throw ConfigError("--sse-keepalive-s must lie in 0..3600, got " + std::to_string(c.sse_keepalive_s));
  }
  check_range("--default-max-tokens", c.default_max_tokens, 0, 1 << 30);
  check_range("--responses-store-entries", c.responses_store_entries, 0, 1 << 20);
  check_range("--responses-store-ttl-s", c.responses_store_ttl_s, 1, 7 * 24 * 3600);
  check_range<int64_t>("--responses-store-bytes", c.responses_store_bytes, 0, int64_t{1} << 40);
  check_range("--max-logprobs", c.max_logprobs, 0, 100);
  check_range("--max-stop-strings", c.max_stop_strings, 0, 1024);
  check_one_of("--reasoning-parser", c.reasoning_parser, {"qwen3", "none"});
  if (!parse_reasoning_field(c.reasoning_field)) {
    check_one_of("--reasoning-field", c.reasoning_field, {"reasoning_content", "reasoning", "both"});
  }
  if (!c.default_chat_template_kwargs.is_object()) {
    throw ConfigError("--default-chat-template-kwargs must be a JSON object");
  }
  check_range("--max-streams", c.max_streams, 0, 65536);
  check_range("--max-waiting", c.max_waiting, 1, 1 << 20);  // the engine queues at least one
  check_range("--context-tokens", c.context_tokens, 0, 1 << 24);
  if (c.context_tokens == 1) {
    throw ConfigError("--context-tokens must be 0 (the model's window) or at least 2 (one prompt token and one generated), got 1");
  }
  check_range("--max-batched-tokens", c.max_batched_tokens, 1, 1 << 20);
  check_range("--max-prefill-chunk-tokens", c.max_prefill_chunk_tokens, 1, 1 << 20);
  if (c.max_streams > c.max_batched_tokens) {
    throw ConfigError("--max-streams " + std::to_string(c.max_streams) + " exceeds --max-batched-tokens " +
                      std::to_string(c.max_batched_tokens) + ": each running stream needs its decode row in every step");
  }
  check_range("--kv-block-tokens", c.kv_block_tokens, 1, 4096);
  check_range("--kv-blocks", c.kv_blocks, 0, 1 << 26);
  check_range("--draft-depth", c.draft_depth, -1, 16);
  check_one_of("--drafter", c.drafter, {"mtp", "dflash", "none"});
  if (c.drafter == "dflash" && c.draft_model.empty()) throw ConfigError("--drafter dflash needs --draft-model PATH (a DFlash draft model directory)");
  if (c.drafter != "dflash" && !c.draft_model.empty()) throw ConfigError("--draft-model is for --drafter dflash (got --drafter " + c.drafter + ")");
  check_range("--cpu-threads", c.cpu_threads, 0, 4096);
  check_range("--prefix-cache-device-bytes", c.prefix_cache_device_bytes, int64_t{0}, int64_t{1} << 46);
  check_range("--prefix-cache-host-bytes", c.prefix_cache_host_bytes, int64_t{0}, int64_t{1} << 46);
  check_range("--prefix-checkpoint-tokens", c.prefix_checkpoint_tokens, 0, 1 << 24);
  check_one_of("--state-precision", c.state_precision, {"f32", "bf16"});
  check_one_of("--matvec", c.matvec, {"auto", "fma", "tensor", "staged"});
  check_one_of("--gdn-prefill", c.gdn_prefill, {"auto", "recurrent", "chunked"});
  check_one_of("--gpu-step-graphs", c.gpu_step_graphs, {"auto", "on", "off"});
  if (!(c.metrics_rate_window_s >= 0.1 && c.metrics_rate_window_s <= 3600.0)) {
    throw ConfigError("--metrics-rate-window-s must lie in 0.1..3600, got " +
                      std::to_string(c.metrics_rate_window_s));
  }
  check_one_of("--log-level", c.log_level, {"trace", "debug", "info", "warn", "error"});
  check_range("--fake-step-us", c.fake_step_us, 0, 1000000);
  check_range("--fake-load-ms", c.fake_load_ms, 0, 600000);
  if (c.device != "auto" && c.device != "cpu" && c.device.rfind("cuda", 0) != 0 &&
      c.device.rfind("hip", 0) != 0) {
    throw ConfigError("--device must be auto, cpu, cuda[:N] or hip[:N], got '" + c.device + "'");
  }
  validate_devices(c);
}

}  // namespace deltaserve::server
