#include "server/server_config.h"

#include "server/default_model.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

namespace deltaserve::server {
namespace {

// One option: its flag, its JSON key, and how to move its value between the command line,
// the JSON file and the struct. The table below is the single list of options.
struct OptionDef {
  std::string flag;  // "--max-streams"
  std::string key;   // "max_streams"
  std::function<CLI::Option*(CLI::App&, ServerConfig&)> add_flag;
  std::function<void(ServerConfig&, const nlohmann::json&, const std::string&)> read_json;
  std::function<void(ServerConfig&, const ServerConfig&)> copy;
  std::function<void(const ServerConfig&, nlohmann::ordered_json&)> write_json;
};

std::string where(const std::string& source, const std::string& key) {
  return source + ": option '" + key + "'";
}

template <class T>
T json_value(const nlohmann::json& v, const std::string& at) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw ConfigError(at + " must be true or false");
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) throw ConfigError(at + " must be an integer");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())
                               : (v.get<int64_t>() < std::numeric_limits<T>::min() ||
                                  v.get<int64_t>() > std::numeric_limits<T>::max())) {
      throw ConfigError(at + " is out of range");
    }
    return static_cast<T>(v.get<int64_t>());
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number()) throw ConfigError(at + " must be a number");
    return v.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) throw ConfigError(at + " must be a string");
    return v.get<std::string>();
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>);
    if (v.is_string()) return {v.get<std::string>()};
    if (!v.is_array()) throw ConfigError(at + " must be a list of strings");
    std::vector<std::string> out;
    for (const nlohmann::json& item : v) {
      if (!item.is_string()) throw ConfigError(at + " must be a list of strings");
      out.push_back(item.get<std::string>());
    }
    return out;
  }
}

template <class T>
OptionDef def(T ServerConfig::*member, const std::string& key, const std::string& help,
              bool hidden = false) {
  OptionDef d;
  d.key = key;
  d.flag = "--" + key;
  for (char& c : d.flag) c = c == '_' ? '-' : c;
  d.add_flag = [member, flag = d.flag, help, hidden](CLI::App& app, ServerConfig& c) {
    CLI::Option* opt = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      // `--no-NAME` beside `--NAME=false`: the spelling users bring from other servers.
      const std::string negated = "--no-" + flag.substr(2);
      opt = app.add_flag(flag + ",!" + negated, c.*member,
                         help + (c.*member ? " [default: on; " + negated + " turns it off]" : ""));
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      opt = app.add_option(flag, c.*member, help)->delimiter(',');
    } else {
      opt = app.add_option(flag, c.*member, help);
      opt->default_val(c.*member);
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // the last one given wins
    }
    if (hidden) opt->group("");
    return opt;
  };
  d.read_json = [member](ServerConfig& c, const nlohmann::json& v, const std::string& at) {
    c.*member = json_value<T>(v, at);
  };
  d.copy = [member](ServerConfig& to, const ServerConfig& from) { to.*member = from.*member; };
  d.write_json = [member, key](const ServerConfig& c, nlohmann::ordered_json& out) { out[key] = c.*member; };
  return d;
}

// The chat-template kwargs: a JSON object in the file, JSON text on the command line.
OptionDef kwargs_def(const std::shared_ptr<std::string>& text) {
  OptionDef d;
  d.key = "default_chat_template_kwargs";
  d.flag = "--default-chat-template-kwargs";
  d.add_flag = [text](CLI::App& app, ServerConfig&) {
    return app.add_option("--default-chat-template-kwargs", *text,
                          "JSON object merged under every request's chat_template_kwargs, "
                          "e.g. '{\"enable_thinking\": false}'");
  };
  d.read_json = [](ServerConfig& c, const nlohmann::json& v, const std::string& at) {
    if (!v.is_object()) throw ConfigError(at + " must be a JSON object");
    c.default_chat_template_kwargs = v;
  };
  d.copy = [text](ServerConfig& to, const ServerConfig&) {
    nlohmann::json v = nlohmann::json::parse(*text, nullptr, false);
    if (v.is_discarded() || !v.is_object()) {
      throw ConfigError("--default-chat-template-kwargs must be a JSON object, got: " + *text);
    }
    to.default_chat_template_kwargs = std::move(v);
  };
  d.write_json = [](const ServerConfig& c, nlohmann::ordered_json& out) {
    out["default_chat_template_kwargs"] = c.default_chat_template_kwargs;
  };
  return d;
}

std::vector<OptionDef> option_table(const std::shared_ptr<std::string>& kwargs_text) {
  using C = ServerConfig;
  return {
      def(&C::model, "model", "Model: a GGUF file or a Hugging Face directory (safetensors + config.json + tokenizer.json)"),
      def(&C::served_model_name, "served_model_name", "Model id in the API (/v1/models, responses); default: the model file's name"),
      def(&C::chat_template, "chat_template", "Jinja chat template file overriding the model's own"),
      def(&C::device, "device", "Where to run: auto | cpu | cuda[:N] | hip[:N]"),
      def(&C::devices, "devices", "Several devices for one model, comma-separated: cpu:0,cpu:1 | cuda:0,cuda:1 | hip:0,hip:1 (replaces --device; see --split)"),
      def(&C::split, "split", "What several --devices do: layers (each device holds a contiguous range of layers; activations cross once per step) | replicas (one engine per device, each holding the whole model, behind one HTTP front end; requests routed by prefix cache and load)"),
      def(&C::split_layers, "split_layers", "Layer ranges of --split layers, one per device: inclusive ranges '0-19,20-39' or layer counts '20,20'; empty = balanced by memory (equal weight bytes on CPU devices)"),
      def(&C::host, "host", "Address to listen on"),
      def(&C::port, "port", "TCP port; 0 picks a free one (printed on stdout and written to --port-file)"),
      def(&C::port_file, "port_file", "Write the bound port to this file once listening"),
      def(&C::api_keys, "api_key", "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize (repeat or comma-separate for several keys)"),
      def(&C::api_key_file, "api_key_file", "File with one accepted API key per line"),
      def(&C::http_threads, "http_threads", "I/O threads of the HTTP server; 0 = min(4, cores)"),
      def(&C::max_body_bytes, "max_body_bytes", "Largest request body accepted (bigger: 413)"),
      def(&C::max_json_depth, "max_json_depth", "Deepest nesting of arrays/objects in a JSON request body (deeper: 400 json_too_deep, found while parsing)"),
      def(&C::max_json_elements, "max_json_elements", "Most values (of any kind) in a JSON request body (more: 400 json_too_large, found while parsing)"),
      def(&C::keep_alive_timeout_s, "keep_alive_timeout_s", "Seconds an idle keep-alive connection (or a slow request) may take before it is closed"),
      def(&C::shutdown_grace_s, "shutdown_grace_s", "On SIGTERM/SIGINT: seconds in-flight requests get to finish before they are cancelled"),
      def(&C::stream_queue_bytes, "stream_queue_bytes", "Unsent SSE bytes a stream may queue for a slow client before the request is cancelled"),
      def(&C::sse_keepalive_s, "sse_keepalive_s", "Seconds a stream may go without a chunk (queued, long prefill) before an SSE comment ': keep-alive' is sent so proxies keep it open; 0 = never"),
      def(&C::cors_allow_origin, "cors_allow_origin", "Access-Control-Allow-Origin value (e.g. '*'); empty = no CORS headers"),
      def(&C::cors_allow_headers, "cors_allow_headers", "Request headers a CORS preflight allows (comma-separated); empty = whatever the preflight asks for (Access-Control-Request-Headers)"),
      def(&C::retry_after_s, "retry_after_s", "Retry-After seconds sent with 429 and 503"),
      def(&C::default_max_tokens, "default_max_tokens", "max_tokens when a chat or responses request gives none (completions: 16, as OpenAI); 0 = up to the context"),
      def(&C::max_logprobs, "max_logprobs", "Largest top_logprobs (chat) / logprobs (completions) accepted"),
      def(&C::max_stop_strings, "max_stop_strings", "Most stop strings per request"),
      def(&C::reject_unknown_fields, "reject_unknown_fields", "Answer 400 to request fields the server does not know (as OpenAI does)"),
      def(&C::accept_any_model_name, "accept_any_model_name", "Serve requests whatever their 'model' (else an unknown model is a 404)"),
      def(&C::reasoning_parser, "reasoning_parser", "Split <think>...</think> into the reasoning field: qwen3 | none"),
      def(&C::reasoning_field, "reasoning_field", "Response field of the thinking text: reasoning_content | reasoning | both"),
      def(&C::force_include_usage, "force_include_usage", "Send the usage chunk on every stream, asked for or not"),
      kwargs_def(kwargs_text),
      def(&C::responses_store_entries, "responses_store_entries", "Finished /v1/responses kept in memory for previous_response_id (oldest dropped first); 0 = none kept"),
      def(&C::responses_store_ttl_s, "responses_store_ttl_s", "Seconds a stored /v1/responses result stays usable as previous_response_id"),
      def(&C::responses_store_bytes, "responses_store_bytes", "Bytes of JSON the /v1/responses store may hold in all (oldest dropped first)"),
      def(&C::max_streams, "max_streams", "Sequences generating at once (state slots); 0 = as many as memory allows, at most 64 on the CPU and 256 on a GPU (31 under --matvec auto: the most that keep the one-stream decode form)"),
      def(&C::max_waiting, "max_waiting", "Requests waiting for a free stream beyond which new ones get 429"),
      def(&C::context_tokens, "context_tokens", "Prompt + output tokens per sequence; 0 = the model's window (capped by the KV pool)"),
      def(&C::max_batched_tokens, "max_batched_tokens", "Rows (tokens) per engine step: decode, drafts and prefill chunks"),
      def(&C::max_prefill_chunk_tokens, "max_prefill_chunk_tokens", "Prompt tokens of one sequence per step"),
      def(&C::kv_block_tokens, "kv_block_tokens", "Tokens per KV-cache block"),
      def(&C::kv_blocks, "kv_blocks", "KV-cache blocks in the pool; 0 = sized from free memory"),
      def(&C::draft_depth, "draft_depth", "Draft tokens per stream and step: -1 = adaptive (up to 3 with mtp, the block's drafts with dflash), 0 = no speculation"),
      def(&C::drafter, "drafter", "Where drafts come from: mtp (the model's MTP head) | dflash (a DFlash block drafter, --draft-model; one device, not a layer split) | none (no speculation)"),
      def(&C::draft_model, "draft_model", "The DFlash draft model directory (config.json + model.safetensors) for --drafter dflash"),
      def(&C::step_costs_file, "step_costs_file", "Cache file of the step costs the speculation policy measures at start (JSON, keyed by device and model: a file for another device or model, or a bad one, is reported, measured again and rewritten); empty = measure at every start"),
      def(&C::cpu_threads, "cpu_threads", "Threads of the CPU backend; 0 = all cores"),
      def(&C::state_precision, "state_precision", "Recurrent-state element type: f32 | bf16 (half the state memory and traffic; GPU backend only)"),
      def(&C::matvec, "matvec", "Q4_0 decode products on the GPU: fma (f32 on the vector units) | tensor (tensor cores, routed MoE experts grouped by expert, LM head tiled; much faster from ~16 streams, about half the speed for one) | staged (products staged through shared memory onto tensor cores; fastest for a few streams) | auto (tensor with 32+ streams, else staged; fma without bf16 tensor cores)"),
      def(&C::gdn_prefill, "gdn_prefill", "Gated DeltaNet over prefill rows: recurrent (token by token; bits independent of where a prompt is cut) | chunked (the chunked WY form in 64-row chunks at multiples of 64 positions; the same values to f32 rounding, much faster on a GPU for long prompts) | auto (chunked on a CUDA GPU, recurrent on the CPU and HIP); decode and verify rows are always recurrent"),
      def(&C::prefix_cache, "prefix_cache", "Reuse cached prompt prefixes (a conversation's history, a shared system prompt): KV blocks shared, recurrent states restored from checkpoints"),
      def(&C::prefix_cache_device_bytes, "prefix_cache_device_bytes", "Bytes of recurrent-state checkpoints kept next to the state slots (device memory on a GPU); 0 = none there"),
      def(&C::prefix_cache_host_bytes, "prefix_cache_host_bytes", "Bytes of checkpoints spilled to page-locked host memory when the device budget is full; 0 = no host tier"),
      def(&C::prefix_checkpoint_tokens, "prefix_checkpoint_tokens", "A checkpoint every this many tokens of a long prefill (so a prefix shared up to the middle of a prompt hits); 0 = only at the ends of prompts and requests, and where requests arriving together diverge"),
      def(&C::gpu_step_graphs, "gpu_step_graphs", "GPU step graphs (a step's launches captured once per shape, replayed after): auto (on with CUDA, off with HIP) | on | off (every launch eager: debugging, a device whose graph capture fails)"),
      def(&C::vllm_metrics, "vllm_metrics", "Also export vLLM's metric names (vllm: prefix) on /metrics"),
      def(&C::metrics_rate_window_s, "metrics_rate_window_s", "Window of deltaserve_generation_tokens_per_second, seconds"),
      def(&C::log_level, "log_level", "trace | debug | info | warn | error"),
  };
}

std::vector<OptionDef> hidden_table() {
  using C = ServerConfig;
  return {
      def(&C::fake_engine, "fake_engine", "", true),
      def(&C::fake_step_us, "fake_step_us", "", true),
      def(&C::fake_load_ms, "fake_load_ms", "", true),
  };
}

// The whole text of a file an option names. Reading a directory fails inside the stream
// (libstdc++'s filebuf throws; istream::read turns that into badbit), which must end as this
// option's error, not as an abort from a parser reading the stream buffer directly.
std::string read_option_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(flag + ": cannot read '" + path + "'");
  std::string text;
  char chunk[4096];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) text.append(chunk, static_cast<size_t>(in.gcount()));
  if (in.bad()) throw ConfigError(flag + ": cannot read '" + path + "' (not a readable file)");
  return text;
}

void read_key_file(ServerConfig& config) {
  if (config.api_key_file.empty()) return;
  std::istringstream in(read_option_file("--api-key-file", config.api_key_file));
  const size_t size_before = config.api_keys.size();
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) config.api_keys.push_back(line);
  }
  // An empty key file (a secret not mounted yet) would leave every route open: refuse it.
  if (size_before == config.api_keys.size()) {
    throw ConfigError("--api-key-file: '" + config.api_key_file + "' holds no API key");
  }
}

}  // namespace

nlohmann::ordered_json ServerConfig::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const OptionDef& d : option_table(std::make_shared<std::string>())) d.write_json(*this, out);
  // Secrets never leave the process: each key shows as a placeholder (their number stays
  // visible); --api-key-file names a path, not a secret.
  nlohmann::ordered_json keys = nlohmann::ordered_json::array();
  for (size_t i = 0; i < api_keys.size(); ++i) keys.push_back(kRedacted);
  out["api_key"] = std::move(keys);
  return out;
}

void apply_config_json(ServerConfig& config, const nlohmann::json& document,
                       const std::string& source) {
  if (!document.is_object()) throw ConfigError(source + ": the config must be a JSON object");
  const std::vector<OptionDef> table = option_table(std::make_shared<std::string>());
  for (auto it = document.begin(); it != document.end(); ++it) {
    auto d = std::find_if(table.begin(), table.end(),
                          [&](const OptionDef& o) { return o.key == it.key(); });
    if (d == table.end()) {
      throw ConfigError(source + ": unknown option '" + it.key() +
                        "' (deltaserve serve --dump-config lists every option)");
    }
    d->read_json(config, it.value(), where(source, it.key()));
  }
}

ServeInvocation load_server_config(int argc, char** argv) {
  ServeInvocation result;
  ServerConfig cli;  // what the flags set (defaults where not given)
  auto kwargs_text = std::make_shared<std::string>("{}");
  std::vector<OptionDef> table = option_table(kwargs_text);
  for (OptionDef& d : hidden_table()) table.push_back(std::move(d));

  CLI::App app("deltaserve serve: the OpenAI-compatible HTTP daemon. Every option can also be "
               "set in the JSON file given by --config (key = flag name with '_' for '-'); "
               "flags override the file.",
               "deltaserve serve");
  app.footer(kExitCodesHelp);
  std::string config_path;
  bool dump_config = false;
  app.add_option("--config", config_path, "JSON config file (see config/deltaserve.json)");
  app.add_flag("--dump-config", dump_config,
               "Print the effective configuration as JSON and exit (API keys shown as \"<redacted>\")");
  std::vector<std::pair<const OptionDef*, CLI::Option*>> flags;
  for (const OptionDef& d : table) flags.emplace_back(&d, d.add_flag(app, cli));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    result.exit_now = true;
    result.exit_code = app.exit(e) == 0 ? kExitOk : kExitConfig;  // --help: 0; a bad flag: 2
    return result;
  }

  ServerConfig config;
  if (!config_path.empty()) {
    nlohmann::json document = nlohmann::json::parse(read_option_file("--config", config_path), nullptr, false);
    if (document.is_discarded()) throw ConfigError(config_path + ": not valid JSON");
    apply_config_json(config, document, config_path);
  }
  for (const auto& [d, opt] : flags) {
    if (opt->count() > 0) d->copy(config, cli);
  }
  read_key_file(config);
  if (config.model.empty() && !config.fake_engine) config.model = find_default_model();
  validate_config(config);
  if (dump_config) {
    std::cout << config.to_json().dump(2) << "\n";
    result.exit_now = true;
  }
  result.config = std::move(config);
  return result;
}

}  // namespace deltaserve::server
