// `deltaserve bench decode|prefill`: a model (a preset with synthetic weights, or a file) on a
// backend, timed over hand-made batch plans; prints a table and optionally writes JSON.
// `bench write-gguf` writes a preset's weights as a servable file (bench_write_gguf.cpp);
// `bench policy` replays the speculation policy on a step-cost table (bench_policy.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/bench_policy.h"
#include "cli/bench_runs.h"
#include "cli/bench_speculation.h"
#include "cli/bench_trace.h"
#include "cli/bench_write_gguf.h"
#include "cli/commands.h"
#include "runtime/backend_factory.h"
#include "runtime/model_preset.h"
#include "runtime/model_runner.h"
#include "runtime/step_traffic.h"
#include "runtime/synthetic_model.h"

namespace deltaserve::cli {
namespace {

using runtime::Backend;
using runtime::LoadedModel;

struct BenchCommand {
  std::string mode;  // "decode" or "prefill"
  std::string preset, model_path, weights = "q4_0", device = "auto", json_path, state_precision = "f32", matvec = "auto", step_graphs = "auto", gdn_prefill = "auto";
  std::string devices, split_layers;  // a layer split (runtime/device_split.h); empty = --device
  int threads = 0;
  BenchOptions o;
};

// Decimal units, as MODEL.md's size tables.
std::string gb(double bytes) {
  char buf[32];
  if (bytes >= 1e9) std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  else std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
  return buf;
}

// "VmRSS" / "VmHWM" of this process in bytes (0 where /proc is absent).
double proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) * 1024.0;
  }
  return 0;
}

void add_common_options(CLI::App& app, BenchCommand& c) {
  app.add_option("--preset", c.preset, "Model shapes: a built-in preset name (see --list-presets) or a preset .json file");
  app.add_option("--model", c.model_path, "A GGUF file or HF directory instead of a preset (real weights)");
  app.add_option("--weights,--quant", c.weights, "Synthetic weight type: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k")
      ->capture_default_str();
  app.add_option("--seed", c.o.seed, "Seed of the synthetic weights and of the token ids")->capture_default_str();
  app.add_option("--device", c.device, "cpu, cuda[:N], hip[:N], gpu[:N] or auto")->capture_default_str();
  app.add_option("--devices", c.devices, "A layer split over several devices, e.g. cpu:0,cpu:1 (replaces --device)");
  app.add_option("--split-layers", c.split_layers, "Layer ranges of --devices: '0-19,20-39' or counts '20,20'; default: balanced");
  app.add_option("--batch", c.o.batch_sizes, "Streams per run, comma-separated")->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--context", c.o.context_tokens, "Tokens in each stream's cache before timing (filled by a prefill)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--chunk", c.o.chunk_tokens, "Prefill tokens per stream and forward (prompt and context fill)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--warmup", c.o.num_warmup, "Untimed steps (decode) or repetitions (prefill) first")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--kv-block-tokens", c.o.kv_block_tokens, "Tokens per KV block")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--state-precision", c.state_precision,
                 "Recurrent-state element type: f32, or bf16 (half the state memory and traffic; GPU backend only)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app.add_option("--matvec", c.matvec,
                 "Q4_0 decode products on the GPU: fma, tensor (tensor cores; routed MoE experts grouped by expert, LM head tiled), "
                 "staged (products staged through shared memory onto tensor cores, for a few streams), or auto (tensor "
                 "with 32+ streams, else staged; fma without bf16 tensor cores)")
      ->check(CLI::IsMember({"auto", "fma", "tensor", "staged"}))
      ->capture_default_str();
  app.add_option("--gdn-prefill", c.gdn_prefill,
                 "Gated DeltaNet over prefill rows: recurrent (token by token), chunked (64-row WY chunks), or auto "
                 "(chunked on a CUDA GPU, recurrent on the CPU and HIP)")
      ->check(CLI::IsMember({"auto", "recurrent", "chunked"}))
      ->capture_default_str();
  app.add_option("--step-graphs", c.step_graphs,
                 "GPU step graphs: auto (on with CUDA, off with HIP), on, or off (every launch eager)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_flag("--timeline", c.o.gpu_tuning.timeline,
               "GPU in-step launch timeline, one table per step shape on stderr (a build configured with "
               "-DDELTASERVE_GPU_TIMELINE=ON)");
  app.add_option("--threads", c.threads, "CPU threads (backend and weight generation; 0 = all)")->check(CLI::Range(0, 4096));
  app.add_option("--json", c.json_path, "Also write the results as JSON to FILE");
  app.add_flag("--trace", c.o.trace,
               "After each cell's timed steps, one traced pass (GPU backend, eager): a table of launches and device time "
               "per kernel class");
}

std::unique_ptr<LoadedModel> build_model(const BenchCommand& c) {
  if (!c.model_path.empty()) {
    auto model = runtime::load_model(c.model_path);
    std::printf("model      %s (%s, real weights)\n", c.model_path.c_str(), model->format.c_str());
    return model;
  }
  const runtime::ModelPreset preset = runtime::find_preset(c.preset);
  const kernels::DType type = runtime::parse_synthetic_weight_type(c.weights);
  const double bytes = static_cast<double>(runtime::synthetic_model_bytes(preset.config, type));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = runtime::make_synthetic_model(preset.config, type, c.o.seed, c.threads);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("model      %s, synthetic %s weights (seed %llu): %s, generated in %.2f s (%.2f GB/s)\n", preset.name.c_str(),
              std::string(kernels::dtype_name(type)).c_str(), static_cast<unsigned long long>(c.o.seed), gb(bytes).c_str(), s,
              s > 0 ? bytes / s / 1e9 : 0.0);
  return model;
}

void print_memory(const Backend& backend) {
  const char* precision = runtime::state_precision_name(backend.cache_config().state_precision);
  const runtime::BackendMemoryStats m = backend.memory_stats();
  std::printf("memory     host RSS %s (peak %s)", gb(proc_status_bytes("VmRSS")).c_str(), gb(proc_status_bytes("VmHWM")).c_str());
  if (m.device_bytes_total > 0 || m.device_bytes_used > 0)
    std::printf(", device %s of %s", gb(static_cast<double>(m.device_bytes_used)).c_str(),
                gb(static_cast<double>(m.device_bytes_total)).c_str());
  if (m.pinned_bytes > 0) std::printf(", pinned %s", gb(static_cast<double>(m.pinned_bytes)).c_str());
  const runtime::BackendCacheBytes cache = runtime::backend_cache_bytes(backend);
  if (cache.kv_cache_bytes > 0 || cache.state_bytes > 0)
    std::printf(", KV cache %s, recurrent state %s (%s)", gb(static_cast<double>(cache.kv_cache_bytes)).c_str(),
                gb(static_cast<double>(cache.state_bytes)).c_str(), precision);
  std::printf("\n");
}

// A layer split's devices: layers, memory, and the activation hop into each (over every
// forward of the run, warm-ups included).
void print_split(const Backend& backend) {
  for (const runtime::SplitDeviceStats& d : backend.split_stats()) {
    std::printf("split      %s layers %d-%d, %s", runtime::device_name(d.device).c_str(), d.layers.first, d.layers.end - 1,
                gb(static_cast<double>(d.bytes_used)).c_str());
    if (d.inbound.copies > 0)
      std::printf("; in: %llu hops, %s, %.3f ms per hop", static_cast<unsigned long long>(d.inbound.copies),
                  gb(static_cast<double>(d.inbound.bytes)).c_str(), d.inbound.seconds * 1e3 / static_cast<double>(d.inbound.copies));
    std::printf("\n");
  }
}

// Each row's lower-bound bytes and its arithmetic (step_traffic.h). Decode: the mean cached context over the
// timed steps (each step adds kept tokens per stream after the warm-up ones).
void set_min_bytes(std::vector<BenchRow>& rows, const LoadedModel& model, const BenchOptions& o, bool prefill) {
  for (BenchRow& r : rows) {
    if (prefill) {
      r.min_bytes = runtime::step_traffic(model, r.num_streams, r.prompt_tokens, o.context_tokens, o.state_precision).total();
      r.flops = runtime::step_flops(model, r.num_streams, r.prompt_tokens, o.context_tokens).total();
    } else {
      const int64_t context = o.context_tokens + static_cast<int64_t>(r.kept_per_stream) *
                                                     (o.num_warmup + (o.num_steps - 1) / 2);
      r.min_bytes = runtime::step_traffic(model, r.num_streams, r.rows_per_stream, context, o.state_precision).total();
      r.flops = runtime::step_flops(model, r.num_streams, r.rows_per_stream, context).total();
    }
  }
}

// Decode with simulated acceptance (cli/bench_speculation.h): the speculation table instead.
int run_speculation_bench(const BenchCommand& c, const LoadedModel& model, Backend& backend) {
  std::string rates;
  for (const double a : c.o.acceptance) rates += (rates.empty() ? "" : "/") + std::to_string(a).substr(0, 4);
  std::printf("speculate  simulated acceptance %s by draft position (each given the ones before)%s\n\n", rates.c_str(),
              backend.config().num_mtp_layers > 0 ? "" : "; the model has no MTP head: draft passes not timed");
  std::shared_ptr<const runtime::StepCostTable> costs;
  const std::vector<SpeculationRow> rows = run_speculation(backend, c.o, costs);
  print_speculation_table(rows);
  std::printf("\n");
  print_memory(backend);
  if (!c.json_path.empty()) {
    nlohmann::json j = {{"command", "bench decode (simulated acceptance)"},
                        {"model", model.path},
                        {"backend", backend.name()},
                        {"device", c.device},
                        {"context_tokens", c.o.context_tokens},
                        {"seed", c.o.seed},
                        {"acceptance", c.o.acceptance},
                        {"results", speculation_to_json(rows)},
                        {"step_costs", nlohmann::json::parse(costs->to_json())}};
    std::ofstream out(c.json_path);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error(c.json_path + ": cannot write");
  }
  return 0;
}

int run_bench(BenchCommand& c) {
  const bool prefill = c.mode == "prefill";
  // Before generating gigabytes of weights: a GPU asked of a build or host without one.
  if (c.device != "cpu" && c.device != "auto" && !runtime::gpu_backend_available())
    throw std::runtime_error("--device " + c.device + ": this build has no GPU backend or no GPU is visible");
  auto model = build_model(c);
  const runtime::CacheConfig cache = bench_cache_config(c.o, prefill);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Backend> backend;
  if (c.devices.empty()) {
    backend = runtime::make_backend(c.device, *model, cache, c.threads);
  } else {
    const std::vector<runtime::DeviceId> devices = runtime::parse_device_list(c.devices);
    backend = runtime::make_device_backend(devices, runtime::SplitMode::kLayers,
                                           runtime::parse_layer_split(c.split_layers, devices.size()), *model, cache, c.threads);
  }
  std::printf("backend    %s (device '%s'), ready in %.2f s; %d slots, %d KV blocks of %d tokens\n", backend->name().c_str(),
              (c.devices.empty() ? c.device : c.devices).c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              cache.num_state_slots, cache.num_kv_blocks, cache.kv_block_tokens);
  if (const std::string settings = backend->speed_settings(); !settings.empty()) std::printf("settings   %s\n", settings.c_str());
  std::printf("plan       %s: context %d tokens/stream, %d timed %s (+%d warmup)", c.mode.c_str(), c.o.context_tokens,
              c.o.num_steps, prefill ? "repetitions" : "steps", c.o.num_warmup);
  if (!prefill) {
    std::string rows;
    for (int32_t r : c.o.rows_per_step) rows += (rows.empty() ? "" : ",") + std::to_string(r);
    std::printf(", %s row(s)/stream/step", rows.c_str());
    if (*std::max_element(c.o.rows_per_step.begin(), c.o.rows_per_step.end()) > 1) {
      std::printf(" (more than one: a verify step with row states, then a rollback keeping %s)",
                  c.o.accept_rows > 0 ? (std::to_string(c.o.accept_rows) + " row(s)").c_str() : "every row");
    }
    if (c.o.sampled_streams > 0) {
      std::printf("; %d stream(s) sampled at temperature 1 %s%s", c.o.sampled_streams,
                  c.o.sampled_on_host || c.o.constrained ? "on the host" : "by the backend (only ids leave it)",
                  c.o.constrained ? " under a JSON-object grammar" : "");
    }
  }
  std::printf("\n");
  // set_kernel_trace(false) is a probe: true only for a backend that can trace.
  if (c.o.trace && !runtime::set_kernel_trace(*backend, false)) {
    std::printf("trace      --trace needs a GPU backend (this run's backend is %s): no trace tables\n",
                backend->name().c_str());
    c.o.trace = false;
  } else if (c.o.trace) {
    std::printf("trace      after each cell's timed %s: %s with the kernel trace on (eager, graphs off)\n",
                prefill ? "repetitions" : "steps",
                prefill ? "one more prompt" : (std::to_string(kTraceDecodeSteps) + " more steps").c_str());
  }
  const double copy_gb_per_s = runtime::measure_copy_gb_per_s(*backend);
  if (copy_gb_per_s > 0)
    std::printf("copy       %.1f GB/s (%s, read + write)\n", copy_gb_per_s,
                backend->name().rfind("cpu", 0) == 0 ? "host memcpy, one thread" : "device-to-device memcpy");
  else
    std::printf("copy       n/a (the copy could not be measured)\n");
  std::printf("\n");
  if (!prefill && !c.o.acceptance.empty()) return run_speculation_bench(c, *model, *backend);
  std::vector<BenchRow> rows = prefill ? run_prefill(*backend, c.o) : run_decode(*backend, c.o);
  set_min_bytes(rows, *model, c.o, prefill);
  if (prefill) print_prefill_table(rows);
  else print_decode_table(rows, copy_gb_per_s);
  print_trace_tables(rows, prefill);
  std::printf("\n");
  print_memory(*backend);
  print_split(*backend);
  if (!c.json_path.empty()) {
    nlohmann::json j = {{"command", "bench " + c.mode},
                        {"model", model->path},
                        {"backend", backend->name()},
                        {"device", c.devices.empty() ? c.device : c.devices},
                        {"context_tokens", c.o.context_tokens},
                        {"seed", c.o.seed},
                        {"state_precision", runtime::state_precision_name(c.o.state_precision)},
                        {"matvec", runtime::decode_matvec_name(c.o.decode_matvec)},
                        {"gdn_prefill", runtime::gdn_prefill_name(c.o.gdn_prefill)},
                        {"copy_gb_per_s", copy_gb_per_s},
                        {"results", rows_to_json(rows, prefill, copy_gb_per_s)}};
    std::ofstream out(c.json_path);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error(c.json_path + ": cannot write");
  }
  return 0;
}

void print_presets() {
  std::printf("%-18s %10s %10s  %s\n", "preset", "q4_0", "bf16", "description");
  for (const runtime::ModelPreset& p : runtime::builtin_presets()) {
    const double q4 = static_cast<double>(runtime::synthetic_model_bytes(p.config, kernels::DType::Q4_0));
    const double bf16 = static_cast<double>(runtime::synthetic_model_bytes(p.config, kernels::DType::BF16));
    std::printf("%-18s %10s %10s  %s\n", p.name.c_str(), gb(q4).c_str(), gb(bf16).c_str(), p.description.c_str());
  }
}

// `bench policy`: the speculation policy replayed on a step-cost table (cli/bench_policy.h).
CLI::App* add_policy_subcommand(CLI::App& app, PolicyBenchOptions& policy_options) {
  CLI::App* policy = app.add_subcommand(
      "policy", "The speculation policy simulated on a step-cost table (no model, no device): tokens per predicted "
                "second against fixed depths");
  policy->add_option("--step-costs", policy_options.step_costs_path,
                     "A step-cost file (serve --step-costs-file) or a `bench decode --acceptance --json` result")
      ->required();
  policy->add_option("--acceptance", policy_options.acceptance,
                     "Acceptance of draft position 1, 2, .. (each given the ones before), comma-separated")
      ->required()
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  policy->add_option("--batch", policy_options.batch_sizes, "Streams per run, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  policy->add_option("--steps", policy_options.num_steps, "Counted steps per cell")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  policy->add_option("--warmup", policy_options.num_warmup, "Steps first, not counted")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  policy->add_option("--seed", policy_options.seed, "Seed of the acceptance draws")->capture_default_str();
  return policy;
}

int policy_main(const PolicyBenchOptions& policy_options) {
  if (policy_options.acceptance.size() > static_cast<size_t>(runtime::kMaxDraftDepth)) {
    std::fprintf(stderr, "deltaserve bench policy: --acceptance lists at most %d positions\n", runtime::kMaxDraftDepth);
    return 2;
  }
  try {
    return run_policy_bench(policy_options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve bench policy: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int bench_main(int argc, char** argv) {
  BenchCommand c;
  CLI::App app("deltaserve bench: time decode steps or prefill of a model (a preset with synthetic weights, or a file) "
               "on a backend");
  app.require_subcommand(0, 1);
  bool list_presets = false;
  app.add_flag("--list-presets", list_presets, "Print the built-in presets and exit");
  CLI::App* decode = app.add_subcommand("decode", "Decode steps: one row (or 1 + drafts) per stream per forward");
  CLI::App* prefill = app.add_subcommand("prefill", "Prompt processing in chunks");
  CLI::App* write_gguf = app.add_subcommand(
      "write-gguf", "Write a preset's synthetic weights as a GGUF file the daemon serves (served figures at bench's shapes)");
  WriteGgufOptions write_gguf_options;
  add_write_gguf_options(*write_gguf, write_gguf_options);
  PolicyBenchOptions policy_options;
  CLI::App* policy = add_policy_subcommand(app, policy_options);
  add_common_options(*decode, c);
  decode->add_option("--steps", c.o.num_steps, "Timed steps per batch size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  decode->add_option("--rows,--draft-rows", c.o.rows_per_step,
                     "Rows per stream and step, comma-separated, a run each (1 + drafts; more than one: a verify step "
                     "with row states)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  decode->add_option("--accept", c.o.accept_rows, "Rows kept per stream after a verify step (default: all; at most every --rows value)")
      ->check(CLI::Range(1, 64));
  decode->add_option("--sampled-streams", c.o.sampled_streams,
                     "Streams whose rows are sampled at temperature 1 within the timed step, drawn by the backend "
                     "(the daemon's path for plain sampled requests) or, with --sampled-on-host, on the host from "
                     "copied logits (default 0: greedy on the device)")
      ->check(CLI::Range(0, 1 << 16));
  decode->add_flag("--sampled-on-host", c.o.sampled_on_host,
                   "Draw the sampled streams on the host from copied logits (the path of requests with bias, "
                   "penalties or logprobs)");
  decode->add_flag("--constrained", c.o.constrained,
                   "The sampled streams carry a JSON-object grammar constraint (constrained decoding's cost)");
  decode->add_option("--acceptance", c.o.acceptance,
                     "Simulated speculation: acceptance of draft position 1, 2, .. (each given the ones before), "
                     "comma-separated, e.g. 0.8,0.6,0.45; prints tokens/s per --depths mode instead of the step table")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  decode->add_option("--depths", c.o.depth_modes,
                     "With --acceptance: the depth modes compared, comma-separated: 'off' (no speculation, no MTP "
                     "work), a fixed depth (0-" +
                         std::to_string(runtime::kMaxDraftDepth) +
                         "; 0 still runs the MTP catch-up pass) or 'policy' (the speculation policy over costs measured "
                         "first); default off, 0 .. the acceptance list's length, policy")
      ->delimiter(',');
  add_common_options(*prefill, c);
  prefill->add_option("--steps", c.o.num_steps, "Timed repetitions per prompt length")->check(CLI::Range(1, 1 << 20));
  prefill->add_option("--prompt", c.o.prompt_tokens, "Prompt lengths, comma-separated")->delimiter(',')->check(CLI::Range(1, 1 << 24));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (list_presets) {
    print_presets();
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr, "%s", app.help().c_str());
    return 2;
  }
  if (write_gguf->parsed()) return write_gguf_main(write_gguf_options);
  if (policy->parsed()) return policy_main(policy_options);
  c.mode = decode->parsed() ? "decode" : "prefill";
  if (const auto precision = runtime::parse_state_precision(c.state_precision)) {
    c.o.state_precision = *precision;
  } else {  // IsMember above already refuses it; kept for a clear line should the two drift
    std::fprintf(stderr, "deltaserve bench %s: --state-precision must be f32 or bf16, got '%s'\n", c.mode.c_str(),
                 c.state_precision.c_str());
    return 2;
  }
  c.o.decode_matvec = runtime::parse_decode_matvec(c.matvec).value_or(runtime::DecodeMatvec::kAuto);
  c.o.gdn_prefill = runtime::parse_gdn_prefill(c.gdn_prefill).value_or(runtime::GdnPrefill::kAuto);
  c.o.gpu_tuning.step_graphs = runtime::parse_step_graph_mode(c.step_graphs).value_or(runtime::StepGraphMode::kAuto);
  if (c.mode == "prefill") {
    if (prefill->count("--steps") == 0) c.o.num_steps = 3;
    if (prefill->count("--warmup") == 0) c.o.num_warmup = 1;
    if (c.o.prompt_tokens.empty()) c.o.prompt_tokens = {512, 2048};
    if (c.o.batch_sizes.empty()) c.o.batch_sizes = {1};
  } else if (c.o.batch_sizes.empty()) {
    c.o.batch_sizes = {1, 4, 16, 64};
  }
  if (c.preset.empty() == c.model_path.empty()) {
    std::fprintf(stderr, "deltaserve bench %s: give exactly one of --preset NAME and --model FILE (--list-presets)\n",
                 c.mode.c_str());
    return 2;
  }
  if (c.o.rows_per_step.empty()) c.o.rows_per_step = {1};
  if (!c.o.acceptance.empty()) {
    if (c.o.acceptance.size() > static_cast<size_t>(runtime::kMaxDraftDepth)) {
      std::fprintf(stderr, "deltaserve bench decode: --acceptance lists at most %d positions\n", runtime::kMaxDraftDepth);
      return 2;
    }
    if (c.o.depth_modes.empty()) {
      c.o.depth_modes.push_back("off");
      for (size_t d = 0; d <= c.o.acceptance.size(); ++d) c.o.depth_modes.push_back(std::to_string(d));
      c.o.depth_modes.push_back("policy");
    }
    for (const std::string& mode : c.o.depth_modes) {
      if (mode == "policy" || mode == "off") continue;
      const bool digits = !mode.empty() && mode.size() <= 2 && std::all_of(mode.begin(), mode.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (!digits || std::stoi(mode) > runtime::kMaxDraftDepth) {
        std::fprintf(stderr, "deltaserve bench decode: --depths takes 'off', 'policy' or a depth 0-%d, got '%s'\n",
                     runtime::kMaxDraftDepth, mode.c_str());
        return 2;
      }
    }
    // The cache is sized for the deepest verify step.
    c.o.rows_per_step = {1 + speculation_max_depth(c.o)};
    c.o.accept_rows = 0;
  } else if (!c.o.depth_modes.empty()) {
    std::fprintf(stderr, "deltaserve bench decode: --depths needs --acceptance\n");
    return 2;
  }
  const int32_t min_rows = *std::min_element(c.o.rows_per_step.begin(), c.o.rows_per_step.end());
  if (c.o.accept_rows > min_rows) {
    std::fprintf(stderr, "deltaserve bench decode: --accept %d exceeds --rows %d\n", c.o.accept_rows, min_rows);
    return 2;
  }
  try {
    return run_bench(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve bench %s: %s\n", c.mode.c_str(), e.what());
    return 1;
  }
}

}  // namespace deltaserve::cli
