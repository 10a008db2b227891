// The measurements behind `deltaserve bench decode|prefill`: steps of a Backend driven with
// hand-made BatchPlans (no scheduler), timed by the wall clock around each forward (the GPU
// backend synchronises inside forward, so a step's time includes its device work).
// Single-threaded: called from the command's main thread; blocks for the whole run.
//
// --trace (BenchOptions::trace): after a cell's timed steps, one more pass with the backend's
// kernel trace on (runtime::set_kernel_trace; eager, graphs off): kTraceDecodeSteps decode
// steps, or one prompt; the per-class totals land in BenchRow::trace (tables: bench_trace.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend.h"
#include "runtime/gpu/kernel_class_time.h"

namespace deltaserve::cli {

struct BenchOptions {
  std::vector<int32_t> batch_sizes;  // streams per run
  int32_t context_tokens = 0;        // cached in each stream before timing (filled untimed)
  int32_t num_steps = 32;            // timed steps (decode) or timed repetitions (prefill)
  int32_t num_warmup = 2;            // untimed steps / repetitions first
  std::vector<int32_t> rows_per_step = {1};  // decode: rows per stream and step (1 + drafts), a run each
  int32_t accept_rows = 0;           // decode: rows kept after a verify step (0 = all; <= every rows value)
  std::vector<int32_t> prompt_tokens;  // prefill: prompt lengths
  int32_t chunk_tokens = 512;        // prefill and context fill: tokens per stream and forward
  int32_t kv_block_tokens = 16;
  uint64_t seed = 1;                 // token ids of the plans
  runtime::StatePrecision state_precision = runtime::StatePrecision::kF32;  // recurrent (delta) states
  runtime::DecodeMatvec decode_matvec = runtime::DecodeMatvec::kAuto;       // Q4_0 decode matvec (GPU)
  runtime::GdnPrefill gdn_prefill = runtime::GdnPrefill::kAuto;             // GDN prefill rows: recurrent or chunked
  runtime::GpuTuning gpu_tuning{};  // step graphs, the measuring build's timeline (GPU)
  bool trace = false;                // a traced pass per cell after the timed steps (GPU only)
  // decode: the first N streams' rows come to the host and are sampled by the CPU sampler at
  // temperature 1 within the timed step (cli/bench_sampling.h); constrained: under a
  // JSON-object grammar. 0: greedy on the device, as before.
  int32_t sampled_streams = 0;
  bool constrained = false;
  // The sampled streams drawn on the host from copied logits (the path of requests with bias,
  // penalties or logprobs) rather than by the backend (SequenceStep::draws: the daemon's path
  // for plain sampled requests). Constrained streams are always drawn on the host.
  bool sampled_on_host = false;
  // decode with simulated speculation (cli/bench_speculation.h): acceptance of draft position j
  // given 1..j-1 accepted (empty: off), and the depth modes to compare ("policy" or a depth).
  std::vector<double> acceptance;
  std::vector<std::string> depth_modes;
};

// Decode steps of the traced pass (each one taken from the trace on its own).
inline constexpr int32_t kTraceDecodeSteps = 4;

// The traced pass of one cell: per kernel class, summed over num_steps decode steps or one
// prompt (prefill: num_steps = 1).
struct BenchTrace {
  int32_t num_steps = 0;  // 0: not traced
  double wall_ms = 0;     // wall clock around the traced forwards (and rollbacks), summed
  std::vector<runtime::gpu::KernelClassTime> classes;
};

// Percentiles of a list of step times (ms).
struct StepTimes {
  std::vector<double> ms;
  double median() const;
  double p90() const;
  double mean() const;
};

// One table row.
struct BenchRow {
  int32_t num_streams = 0;
  int32_t rows_per_stream = 0;      // decode: the run's rows per stream and step; prefill: chunk tokens
  int32_t kept_per_stream = 0;      // decode: tokens a step adds per stream
  int32_t prompt_tokens = 0;        // prefill only
  int64_t num_forward_calls = 0;    // timed forwards (a prefill repetition is several)
  double launches_per_step = -1;    // -1: the backend does not count launches
  StepTimes times;                  // per step (decode) or per prompt (prefill)
  double fill_tokens_per_s = 0;     // context fill (untimed part), for information
  BenchTrace trace;                 // --trace only
  // Bytes a step (decode) or a prompt of every stream (prefill) must move at least
  // (runtime/step_traffic.h; set by the command); 0 = not known.
  double min_bytes = 0;
  double flops = 0;  // the arithmetic of the same step or prompts (runtime::step_flops); 0 = not known
};

// The cache sizing for a whole run (every batch size; the largest decides).
runtime::CacheConfig bench_cache_config(const BenchOptions& o, bool prefill);

std::vector<BenchRow> run_decode(runtime::Backend& backend, const BenchOptions& o);
// Decode's plans, for the other decode loops (bench_speculation.h): rows [position, position +
// count) of stream s (slot s, its own KV blocks, the bench's token ids), and the untimed fill of
// each of the first num_streams streams with o.context_tokens (returns tokens/s).
runtime::SequenceStep bench_stream_step(const runtime::Backend& backend, const BenchOptions& o, int32_t stream,
                                        int64_t position, int32_t count);
double bench_fill_context(runtime::Backend& backend, const BenchOptions& o, int32_t num_streams,
                          runtime::ForwardOutput& out);
std::vector<BenchRow> run_prefill(runtime::Backend& backend, const BenchOptions& o);

// copy_gb_per_s: the measured copy bandwidth (runtime::measure_copy_gb_per_s) that "% copy"
// compares GB/s (min_bytes / median time) with; 0 prints "n/a".
void print_decode_table(const std::vector<BenchRow>& rows, double copy_gb_per_s);
void print_prefill_table(const std::vector<BenchRow>& rows);
nlohmann::json rows_to_json(const std::vector<BenchRow>& rows, bool prefill, double copy_gb_per_s);

}  // namespace deltaserve::cli
