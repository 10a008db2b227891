// Builds the real serving stack behind --model: runtime model + backend (make_backend) + runtime::BackendRunner
// + scheduler::Engine, and the TokenizerCodec. Called on the loader thread at start.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "runtime/backend_factory.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/backend_runner.h"
#include "runtime/dflash_model.h"
#include "runtime/step_cost_probe.h"
#include "runtime/stream_memory.h"
#include "scheduler/engine.h"
#include "server/model_loader.h"
#include "server/tokenizer_codec.h"

namespace deltaserve::server {
namespace {

// Everything the engine reads, destroyed in reverse order: the engine stops first.
struct ServingStack {
  std::unique_ptr<runtime::LoadedModel> model;
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::BackendRunner> runner;
  std::unique_ptr<scheduler::Engine> engine;
};

std::unique_ptr<runtime::Tokenizer> load_tokenizer(const runtime::LoadedModel& model) {
  if (model.gguf && model.gguf->find("tokenizer.ggml.tokens") != nullptr) return runtime::Tokenizer::from_gguf(*model.gguf);
  if (!model.tokenizer_json_path.empty()) return runtime::Tokenizer::from_json_file(model.tokenizer_json_path);
  throw std::runtime_error(model.path + ": the model carries no tokenizer (no tokenizer.ggml.* keys / tokenizer.json)");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--chat-template: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One line per table for the log: the grid's corners.
std::string describe(const runtime::StepCostTable& t) {
  const auto& s = t.streams();
  const auto& r = t.rows_per_stream();
  const auto& ms = t.trunk_grid_ms();
  char line[256];
  std::snprintf(line, sizeof(line), "%d-%d streams x %d-%d rows each: %.3f ms (1 x 1) .. %.3f ms (%d x %d)%s", s.front(),
                s.back(), r.front(), r.back(), ms.front().front(), ms.back().back(), s.back(), r.back(),
                t.mtp_rows().empty() ? "" : "; MTP passes measured");
  return line;
}

// The speculation policy's step costs: the cache file's when it holds this device's and model's
// table, else measured now on the backend's idle slots (and written to the cache file when one
// is named). A cache file that cannot be used is reported and replaced, never fatal.
std::shared_ptr<const runtime::StepCostTable> step_costs(const ServerConfig& config, runtime::Backend& backend,
                                                         int32_t slots, int32_t draft_depth) {
  runtime::StepCostProbeOptions probe;
  probe.max_streams = slots;
  probe.max_rows_per_stream = 1 + draft_depth;
  probe.max_step_rows = config.max_batched_tokens;
  // Bounded start-up cost: the tiny CPU models measure every cell well within it; a large model
  // on a slow device measures the first grid rows and extrapolates the rest.
  probe.budget_ms = backend.name() == "cpu" ? 1000.0 : 4000.0;
  // The MTP passes are priced only for MTP drafts; a DFlash block's own forward is not
  // measured (docs/speculation.md, "DFlash": the policy prices its verify rows only).
  probe.mtp = config.drafter == "mtp";
  const runtime::StepCostKey key = runtime::step_cost_key(backend, config.model);
  std::vector<std::string> problems;
  bool from_cache = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto table = std::make_shared<const runtime::StepCostTable>(
      runtime::load_or_measure_step_costs(backend, probe, key, config.step_costs_file, problems, &from_cache));
  for (const std::string& problem : problems) spdlog::error("step costs: {}", problem);
  if (from_cache) {
    spdlog::info("step costs: read {} ({})", config.step_costs_file, describe(*table));
  } else {
    spdlog::info("step costs: measured in {:.2f} s on {} ({})",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), key.device, describe(*table));
  }
  return table;
}

// --max-streams 0: as many streams as the device's free memory holds once the weights, the
// prefix cache's budgets and a headroom are set aside (runtime/stream_memory.h), at most
// kMaxGpuAutoStreams on a GPU and kMaxCpuAutoStreams on the CPU, whose every row costs compute
// (a step of 64 rows already takes tens of milliseconds there; memory would allow thousands).
// On a GPU under --matvec auto the slot count also picks the decode form (tensor from
// kTensorMatvecMinSlots slots: fast for many streams, slow for one), so there the sizing stops
// one short of it and a lone user keeps the one-stream form; more slots are an explicit
// --max-streams.
int32_t slots_from_memory(const ServerConfig& config, const runtime::LoadedModel& model, const runtime::CacheConfig& cache,
                          int32_t blocks_per_stream, const std::vector<runtime::DeviceId>& devices) {
  constexpr int32_t kMaxGpuAutoStreams = 256;  // vLLM's default max_num_seqs
  constexpr int32_t kMaxCpuAutoStreams = 64;
  const std::string device = devices.empty() ? config.device : runtime::device_name(devices.front());
  const runtime::DeviceMemory memory = runtime::device_memory(device.rfind("cpu", 0) == 0 ? "cpu" : device);
  const runtime::StreamBytes stream =
      runtime::stream_bytes(model.config, model.weights.has_mtp, cache, blocks_per_stream, memory.gpu);
  // The CPU backend reads the weights from the mapped file: their pages must stay resident too.
  int64_t reserved = runtime::range_weight_bytes(model.weights, {0, static_cast<int32_t>(model.config.num_layers)});
  reserved += config.prefix_cache ? config.prefix_cache_device_bytes + (memory.gpu ? 0 : config.prefix_cache_host_bytes) : 0;
  const bool one_stream_form_cap = memory.gpu && cache.decode_matvec == runtime::DecodeMatvec::kAuto;
  const int32_t device_cap = one_stream_form_cap ? runtime::kTensorMatvecMinSlots - 1
                             : memory.gpu        ? kMaxGpuAutoStreams
                                                 : kMaxCpuAutoStreams;
  // Every running stream needs its decode row in each step: no more streams than rows.
  const int32_t cap = std::min(device_cap, config.max_batched_tokens);
  const runtime::SlotSizing sizing = runtime::size_slots(memory.free_bytes, reserved, stream.total(), cap);
  spdlog::info("--max-streams 0 on {}: {}{}", device, sizing.describe(),
               one_stream_form_cap ? " (the most that keep the one-stream decode form under --matvec auto)" : "");
  return sizing.slots;
}

}  // namespace

LoadedModel load_engine_model(const ServerConfig& config, scheduler::EngineObserver* observer) {
  auto stack = std::make_shared<ServingStack>();
  stack->model = runtime::load_model(config.model);
  const runtime::ModelConfig& mc = stack->model->config;

  auto tokenizer = load_tokenizer(*stack->model);
  if (tokenizer->num_vocab() > mc.num_vocab)
    throw std::runtime_error(config.model + ": tokenizer has " + std::to_string(tokenizer->num_vocab()) +
                             " tokens but the model's vocabulary is " + std::to_string(mc.num_vocab));
  std::string chat_template = config.chat_template.empty() ? stack->model->chat_template : read_text_file(config.chat_template);
  if (chat_template.empty()) {
    spdlog::warn("{}: no chat template in the model; using ChatML", config.model);
    chat_template = kFallbackChatTemplate;
  }
  auto codec = std::make_unique<TokenizerCodec>(std::move(tokenizer), chat_template);

  // Limits: 0 means auto. Every stream gets room for its whole context, so admission never
  // over-commits KV blocks (preemption stays the exception, for explicit --kv-blocks).
  int32_t context = config.context_tokens > 0 ? config.context_tokens
                                              : static_cast<int32_t>(std::min<int64_t>(mc.context_length, 4096));
  const int32_t block_tokens = config.kv_block_tokens;
  // Speculation: --draft-depth N caps the drafts per stream (0 = off); -1 = adaptive up to
  // kDefaultDraftDepth (MTP) or the DFlash block's drafts. --drafter mtp needs an MTP head
  // (models without one never draft); --drafter dflash loads its draft model here.
  constexpr int32_t kDefaultDraftDepth = 3;
  std::optional<runtime::DFlashModel> dflash;
  int32_t draft_depth = config.draft_depth < 0 ? kDefaultDraftDepth : std::min(config.draft_depth, runtime::kMaxDraftDepth);
  if (config.drafter == "none") {
    draft_depth = 0;
  } else if (config.drafter == "dflash") {
    dflash = runtime::load_dflash_model(config.draft_model, mc);
    const int32_t block_drafts = dflash->config.block_size - 1;
    draft_depth = config.draft_depth < 0 ? block_drafts : std::min(draft_depth, block_drafts);
    spdlog::info("DFlash drafter {}: {} layers, block of {} ({} drafts a step at most), target layers {}", config.draft_model,
                 dflash->config.num_layers, dflash->config.block_size, draft_depth, dflash->config.target_layer_ids.size());
    if (draft_depth == 0) dflash.reset();
  } else if (mc.num_mtp_layers == 0 || !stack->model->weights.has_mtp) {
    if (config.draft_depth > 0) spdlog::warn("{}: no MTP head; --draft-depth {} ignored", config.model, config.draft_depth);
    draft_depth = 0;
  }
  // --context-tokens 0 is the model's window capped by the KV pool: with an explicit
  // --kv-blocks one sequence and its drafts must fit the pool, else the scheduler refuses it.
  if (config.context_tokens == 0 && config.kv_blocks > 0) {
    const int64_t pool_tokens = int64_t{config.kv_blocks} * block_tokens - draft_depth;
    context = static_cast<int32_t>(std::max<int64_t>(2, std::min<int64_t>(context, pool_tokens)));
  }
  // Drafts are reserved on top of the context, so every stream's blocks cover them too.
  const int32_t blocks_per_stream = (context + draft_depth + block_tokens - 1) / block_tokens;
  runtime::CacheConfig cache{0, block_tokens, 0, 1 + draft_depth, config.max_batched_tokens};
  cache.state_precision = runtime::parse_state_precision(config.state_precision).value_or(runtime::StatePrecision::kF32);
  cache.decode_matvec = runtime::parse_decode_matvec(config.matvec).value_or(runtime::DecodeMatvec::kAuto);
  cache.gdn_prefill = runtime::parse_gdn_prefill(config.gdn_prefill).value_or(runtime::GdnPrefill::kAuto);
  cache.gpu_tuning.step_graphs = runtime::parse_step_graph_mode(config.gpu_step_graphs).value_or(runtime::StepGraphMode::kAuto);
  const std::vector<runtime::DeviceId> devices = configured_devices(config);
  // DFlash drafts from the trunk's layer outputs (BatchPlan::capture_layers), which the whole
  // trunk on one backend captures, CPU or GPU; the stages of a layer split each hold part of it.
  if (dflash && devices.size() > 1)
    throw std::runtime_error("--drafter dflash needs the trunk's layer outputs, which a layer split over several devices does "
                             "not capture; run the model on one device (cpu, cuda or hip) or use --drafter mtp");
  if (dflash) cache.max_capture_layers = static_cast<int32_t>(dflash->config.target_layer_ids.size());
  const int32_t slots = config.max_streams > 0 ? config.max_streams
                                               : slots_from_memory(config, *stack->model, cache, blocks_per_stream, devices);
  const int32_t blocks = config.kv_blocks > 0 ? config.kv_blocks : slots * blocks_per_stream;
  cache.num_state_slots = slots;
  cache.num_kv_blocks = blocks;
  if (devices.empty()) {
    stack->backend = runtime::make_backend(config.device, *stack->model, cache, config.cpu_threads);
  } else {
    const runtime::SplitMode mode = runtime::parse_split_mode(config.split).value_or(runtime::SplitMode::kLayers);
    stack->backend = runtime::make_device_backend(devices, mode, runtime::parse_layer_split(config.split_layers, devices.size()),
                                                  *stack->model, cache, config.cpu_threads);
    if (devices.size() > 1) spdlog::info("layer split over {} devices: {}", devices.size(), stack->backend->name());
  }
  std::unique_ptr<runtime::DFlashDrafter> dflash_drafter;
  if (dflash) {
    dflash_drafter = std::make_unique<runtime::DFlashDrafter>(std::move(*dflash), stack->model->weights.token_embd,
                                                              stack->model->weights.output, config.cpu_threads);
  }
  stack->runner = std::make_unique<runtime::BackendRunner>(*stack->backend, context, draft_depth, std::move(dflash_drafter));
  scheduler::SchedulerConfig sched;
  sched.max_num_seqs = slots;
  sched.max_num_batched_tokens = config.max_batched_tokens;
  sched.max_prefill_chunk_tokens = config.max_prefill_chunk_tokens;
  sched.max_num_waiting = config.max_waiting;
  sched.max_context_tokens = context;
  sched.max_draft_depth = draft_depth;
  // Draft depths come from the measured cost of rows on this device (scheduler/draft_policy.h):
  // on the CPU verify rows cost real compute and drafting stops from a few streams on; on a GPU
  // they are nearly free while the step is bandwidth-bound.
  if (draft_depth > 0) sched.step_costs = step_costs(config, *stack->backend, slots, draft_depth);
  sched.prefix_cache = config.prefix_cache;
  sched.prefix_cache_device_bytes = config.prefix_cache_device_bytes;
  sched.prefix_cache_host_bytes = config.prefix_cache_host_bytes;
  sched.prefix_checkpoint_tokens = config.prefix_checkpoint_tokens;
  stack->engine = std::make_unique<scheduler::Engine>(*stack->runner, sched, observer);
  // Budgets below one checkpoint leave no room for any: the cache is off, which the operator
  // who asked for it must hear about.
  if (config.prefix_cache && !stack->engine->config().prefix_cache) {
    spdlog::warn("prefix cache off: --prefix-cache-device-bytes {} and --prefix-cache-host-bytes {} hold no "
                 "recurrent-state checkpoint of {} bytes",
                 config.prefix_cache_device_bytes, config.prefix_cache_host_bytes, stack->backend->checkpoint_bytes());
  }
  stack->engine->start();

  LoadedModel loaded;
  loaded.limits.max_streams = slots;
  loaded.limits.max_waiting = config.max_waiting;
  loaded.limits.context_tokens = context;
  loaded.limits.kv_block_tokens = block_tokens;
  loaded.limits.num_kv_blocks = blocks;
  const runtime::BackendCacheBytes cache_bytes = runtime::backend_cache_bytes(*stack->backend);
  loaded.limits.kv_bytes = cache_bytes.kv_cache_bytes;
  loaded.limits.state_bytes = cache_bytes.state_bytes;
  loaded.limits.max_draft_depth = draft_depth;
  loaded.limits.device = stack->backend->name();
  loaded.engine = std::make_unique<EngineAdapter<scheduler::Engine>>(*stack->engine);
  loaded.codec = std::move(codec);
  loaded.resources = stack;
  return loaded;
}

}  // namespace deltaserve::server
