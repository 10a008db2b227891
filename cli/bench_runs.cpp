// Decode and prefill timing loops of `deltaserve bench` (see bench_runs.h).
#include "cli/bench_runs.h"

#include "cli/bench_sampling.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <optional>

#include "cli/bench_trace.h"
#include "runtime/backend_factory.h"

namespace deltaserve::cli {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::Backend;
using runtime::BatchPlan;
using runtime::ForwardOutput;
using runtime::SequenceStep;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Kernel launches since the backend started (read before and after the timed steps); none
// when the backend does not count them (the CPU backend).
std::optional<int64_t> launch_count(const Backend& backend) {
  const int64_t n = backend.kernel_launches();
  if (n < 0) return std::nullopt;
  return n;
}

int32_t max_of(const std::vector<int32_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// Most tokens one stream ever holds in a run (positions written, rolled-back rows included).
int64_t max_stream_tokens(const BenchOptions& o, bool prefill) {
  if (prefill) return int64_t{o.context_tokens} + max_of(o.prompt_tokens);
  const int32_t traced = o.trace ? kTraceDecodeSteps : 0;
  return int64_t{o.context_tokens} + int64_t{o.num_warmup + o.num_steps + traced + 1} * max_of(o.rows_per_step);
}

int32_t blocks_per_stream(const BenchOptions& o, bool prefill) {
  return static_cast<int32_t>((max_stream_tokens(o, prefill) + o.kv_block_tokens - 1) / o.kv_block_tokens);
}

// Token ids: a hash of (seed, stream, position), so every run feeds the same ids.
int32_t token_at(const BenchOptions& o, int64_t num_vocab, int32_t stream, int64_t position) {
  uint64_t z = o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(stream) * 0xD1B54A32D192ED03ull +
               static_cast<uint64_t>(position) * 0x8CB92BA72F3D8DD7ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(num_vocab));
}

class StreamPlanner {
 public:
  StreamPlanner(const Backend& backend, const BenchOptions& o, bool prefill)
      : o_(o), num_vocab_(backend.config().num_vocab), blocks_per_stream_(blocks_per_stream(o, prefill)) {}

  // Rows [position, position + count) of stream s (its slot is s).
  SequenceStep step(int32_t s, int64_t position, int32_t count) const {
    SequenceStep step;
    step.slot = s;
    step.num_cached_tokens = static_cast<int32_t>(position);
    for (int32_t i = 0; i < count; ++i) step.tokens.push_back(token_at(o_, num_vocab_, s, position + i));
    step.kv_blocks.resize(static_cast<size_t>(blocks_per_stream_));
    std::iota(step.kv_blocks.begin(), step.kv_blocks.end(), s * blocks_per_stream_);
    return step;
  }

 private:
  const BenchOptions& o_;
  int64_t num_vocab_;
  int32_t blocks_per_stream_;
};

// Prefills `tokens` tokens into stream s from position 0, one chunk per forward; returns ms.
double fill_stream(Backend& backend, const StreamPlanner& planner, const BenchOptions& o, int32_t s, int32_t tokens,
                   ForwardOutput& out) {
  const auto t0 = Clock::now();
  for (int32_t done = 0; done < tokens;) {
    const int32_t n = std::min(o.chunk_tokens, tokens - done);
    SequenceStep step = planner.step(s, done, n);
    step.num_logits = done + n == tokens ? 1 : 0;
    backend.forward(BatchPlan{{step}}, out);
    done += n;
  }
  return ms_since(t0);
}

double fill_streams(Backend& backend, const StreamPlanner& planner, const BenchOptions& o, int32_t num_streams,
                    ForwardOutput& out) {
  if (o.context_tokens <= 0) return 0;
  double ms = 0;
  for (int32_t s = 0; s < num_streams; ++s) ms += fill_stream(backend, planner, o, s, o.context_tokens, out);
  return static_cast<double>(num_streams) * o.context_tokens / (ms / 1e3);
}

// One decode step of every stream at its position, rows rows each (verify rows when rows > 1).
BatchPlan decode_plan(const StreamPlanner& planner, int32_t rows, const std::vector<int64_t>& position,
                      int32_t sampled_streams = 0, bool sampled_on_host = true) {
  BatchPlan plan;
  for (size_t s = 0; s < position.size(); ++s) {
    SequenceStep step = planner.step(static_cast<int32_t>(s), position[s], rows);
    step.num_logits = rows;  // a verify step samples every row
    step.keep_row_states = rows > 1;
    // Greedy serving: only the argmax ids leave the device; sampled streams take their rows
    // to the host, or the backend draws them at temperature 1 (only the ids leave).
    const bool sampled = static_cast<int32_t>(s) < sampled_streams;
    step.logits_to_host = sampled && sampled_on_host;
    if (sampled && !sampled_on_host) {
      for (int32_t r = 0; r < rows; ++r) {
        kernels::DrawParams p;
        p.word = static_cast<uint32_t>(position[s] * 2654435761u + static_cast<uint64_t>(r));
        step.draws.push_back(p);
      }
    }
    plan.sequences.push_back(std::move(step));
  }
  return plan;
}

// The forward, then the rollbacks of a verify step (rows > 1); returns ms.
double decode_step(Backend& backend, int32_t rows, const BatchPlan& plan, int32_t kept, ForwardOutput& out) {
  const auto t0 = Clock::now();
  backend.forward(plan, out);
  if (rows > 1) {
    for (size_t s = 0; s < plan.sequences.size(); ++s) backend.rollback(static_cast<int32_t>(s), kept);
  }
  return ms_since(t0);
}

// The prompt's forwards for every stream (chunks of o.chunk_tokens after the context), calling
// after_forward after each; returns the forward count.
int64_t prompt_forwards(Backend& backend, const StreamPlanner& planner, const BenchOptions& o, int32_t num_streams,
                        int32_t prompt, ForwardOutput& out, const std::function<void()>& after_forward) {
  int64_t calls = 0;
  for (int32_t done = 0; done < prompt; ++calls) {
    const int32_t n = std::min(o.chunk_tokens, prompt - done);
    BatchPlan plan;
    for (int32_t s = 0; s < num_streams; ++s) {
      SequenceStep step = planner.step(s, int64_t{o.context_tokens} + done, n);
      step.num_logits = done + n == prompt ? 1 : 0;
      plan.sequences.push_back(std::move(step));
    }
    backend.forward(plan, out);
    if (after_forward) after_forward();
    done += n;
  }
  return calls;
}

// The traced decode pass: kTraceDecodeSteps more steps with the kernel trace on, each taken.
BenchTrace trace_decode(Backend& backend, const StreamPlanner& planner, int32_t rows, std::vector<int64_t>& position,
                        int32_t kept, ForwardOutput& out) {
  BenchTrace trace;
  if (!runtime::set_kernel_trace(backend, true)) return trace;
  for (int32_t i = 0; i < kTraceDecodeSteps; ++i) {
    trace.wall_ms += decode_step(backend, rows, decode_plan(planner, rows, position), kept, out);
    add_trace(trace, runtime::take_kernel_trace(backend));
    for (int64_t& p : position) p += kept;
  }
  runtime::set_kernel_trace(backend, false);
  trace.num_steps = kTraceDecodeSteps;
  return trace;
}

// The traced prefill pass: the context fill untraced, then one prompt traced.
BenchTrace trace_prefill(Backend& backend, const StreamPlanner& planner, const BenchOptions& o, int32_t num_streams,
                         int32_t prompt, ForwardOutput& out) {
  BenchTrace trace;
  fill_streams(backend, planner, o, num_streams, out);
  if (!runtime::set_kernel_trace(backend, true)) return trace;
  const auto t0 = Clock::now();
  double take_ms = 0;
  prompt_forwards(backend, planner, o, num_streams, prompt, out, [&] {
    const auto t1 = Clock::now();
    add_trace(trace, runtime::take_kernel_trace(backend));
    take_ms += ms_since(t1);
  });
  trace.wall_ms = ms_since(t0) - take_ms;
  runtime::set_kernel_trace(backend, false);
  trace.num_steps = 1;
  return trace;
}

}  // namespace

runtime::SequenceStep bench_stream_step(const Backend& backend, const BenchOptions& o, int32_t stream, int64_t position,
                                        int32_t count) {
  return StreamPlanner(backend, o, false).step(stream, position, count);
}

double bench_fill_context(Backend& backend, const BenchOptions& o, int32_t num_streams, ForwardOutput& out) {
  return fill_streams(backend, StreamPlanner(backend, o, false), o, num_streams, out);
}

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at)), hi = static_cast<size_t>(std::ceil(at));
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

}  // namespace

double StepTimes::median() const { return percentile(ms, 0.5); }
double StepTimes::p90() const { return percentile(ms, 0.9); }
double StepTimes::mean() const {
  return ms.empty() ? 0 : std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
}

runtime::CacheConfig bench_cache_config(const BenchOptions& o, bool prefill) {
  const int32_t max_streams = max_of(o.batch_sizes);
  runtime::CacheConfig cache;
  cache.num_state_slots = max_streams;
  cache.kv_block_tokens = o.kv_block_tokens;
  cache.num_kv_blocks = max_streams * blocks_per_stream(o, prefill);
  const int32_t max_rows = max_of(o.rows_per_step);
  cache.max_verify_rows = prefill ? 1 : max_rows;
  cache.max_step_rows = prefill ? max_streams * o.chunk_tokens : std::max(max_streams * max_rows, o.chunk_tokens);
  cache.state_precision = o.state_precision;
  cache.decode_matvec = o.decode_matvec;
  cache.gdn_prefill = o.gdn_prefill;
  cache.gpu_tuning = o.gpu_tuning;
  return cache;
}

std::vector<BenchRow> run_decode(Backend& backend, const BenchOptions& o) {
  const StreamPlanner planner(backend, o, false);
  ForwardOutput out;
  std::vector<BenchRow> rows;
  for (int32_t num_streams : o.batch_sizes) {
    for (int32_t rows_per_step : o.rows_per_step) {
      const int32_t kept = o.accept_rows > 0 ? o.accept_rows : rows_per_step;
      BenchRow row;
      row.num_streams = num_streams;
      row.rows_per_stream = rows_per_step;
      row.kept_per_stream = kept;
      row.fill_tokens_per_s = fill_streams(backend, planner, o, num_streams, out);
      std::vector<int64_t> position(static_cast<size_t>(num_streams), o.context_tokens);
      std::optional<int64_t> launches_before;
      const int32_t num_sampled = std::min(o.sampled_streams, num_streams);
      const bool on_host = o.sampled_on_host || o.constrained;
      BenchSamplers samplers(backend.config().num_vocab, on_host ? num_sampled : 0, o.constrained, o.seed);
      for (int32_t i = 0; i < o.num_warmup + o.num_steps; ++i) {
        if (i == o.num_warmup) launches_before = launch_count(backend);
        double ms = decode_step(backend, rows_per_step, decode_plan(planner, rows_per_step, position, num_sampled, on_host), kept, out);
        if (num_sampled > 0 && on_host) ms += samplers.sample(out);
        for (int64_t& p : position) p += kept;
        if (i >= o.num_warmup) {
          row.times.ms.push_back(ms);
          ++row.num_forward_calls;
        }
      }
      const std::optional<int64_t> launches_after = launch_count(backend);
      if (launches_before && launches_after && o.num_steps > 0)
        row.launches_per_step = static_cast<double>(*launches_after - *launches_before) / o.num_steps;
      if (o.trace) row.trace = trace_decode(backend, planner, rows_per_step, position, kept, out);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<BenchRow> run_prefill(Backend& backend, const BenchOptions& o) {
  const StreamPlanner planner(backend, o, true);
  ForwardOutput out;
  std::vector<BenchRow> rows;
  for (int32_t num_streams : o.batch_sizes) {
    for (int32_t prompt : o.prompt_tokens) {
      BenchRow row;
      row.num_streams = num_streams;
      row.rows_per_stream = o.chunk_tokens;
      row.prompt_tokens = prompt;
      for (int32_t rep = 0; rep < o.num_warmup + o.num_steps; ++rep) {
        row.fill_tokens_per_s = fill_streams(backend, planner, o, num_streams, out);
        const auto t0 = Clock::now();
        const int64_t calls = prompt_forwards(backend, planner, o, num_streams, prompt, out, nullptr);
        const double ms = ms_since(t0);
        if (rep >= o.num_warmup) {
          row.times.ms.push_back(ms);
          row.num_forward_calls += calls;
        }
      }
      if (o.trace) row.trace = trace_prefill(backend, planner, o, num_streams, prompt, out);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

namespace {

// Achieved GB/s of a row: its lower-bound bytes over its median time (0 when unknown).
double achieved_gb_per_s(const BenchRow& r) {
  const double s = r.times.median() / 1e3;
  return s > 0 ? r.min_bytes / s / 1e9 : 0;
}

// Achieved TFLOP/s of a row: its arithmetic over its median time (0 when unknown).
double achieved_tflop_per_s(const BenchRow& r) {
  const double s = r.times.median() / 1e3;
  return s > 0 ? r.flops / s / 1e12 : 0;
}

}  // namespace

void print_decode_table(const std::vector<BenchRow>& rows, double copy_gb_per_s) {
  std::printf("%8s %10s %12s %12s %13s %13s %10s %14s %10s %9s %7s %9s\n", "streams", "rows/step", "ms/step p50",
              "ms/step p90", "tok/s total", "tok/s/stream", "fwd calls", "launches/step", "GB/step", "GB/s", "% copy",
              "TFLOP/s");
  for (const BenchRow& r : rows) {
    const double step_s = r.times.median() / 1e3;
    const double per_stream = step_s > 0 ? r.kept_per_stream / step_s : 0;
    char launches[32] = "-";
    if (r.launches_per_step >= 0) std::snprintf(launches, sizeof(launches), "%.1f", r.launches_per_step);
    const double gbs = achieved_gb_per_s(r);
    char copy_pct[32] = "n/a";
    if (copy_gb_per_s > 0) std::snprintf(copy_pct, sizeof(copy_pct), "%.1f", 100.0 * gbs / copy_gb_per_s);
    std::printf("%8d %10d %12.3f %12.3f %13.1f %13.1f %10lld %14s %10.4g %9.2f %7s %9.3f\n", r.num_streams,
                r.num_streams * r.rows_per_stream, r.times.median(), r.times.p90(), per_stream * r.num_streams,
                per_stream, static_cast<long long>(r.num_forward_calls), launches, r.min_bytes / 1e9, gbs, copy_pct,
                achieved_tflop_per_s(r));
  }
}

void print_prefill_table(const std::vector<BenchRow>& rows) {
  std::printf("%8s %8s %7s %12s %12s %12s %12s %10s %9s %9s\n", "streams", "prompt", "chunk", "ms p50", "ms p90", "tok/s",
              "ms/forward", "fwd calls", "GB/s", "TFLOP/s");
  for (const BenchRow& r : rows) {
    const double s = r.times.median() / 1e3;
    const double calls_per_rep = r.times.ms.empty() ? 0 : static_cast<double>(r.num_forward_calls) / r.times.ms.size();
    std::printf("%8d %8d %7d %12.3f %12.3f %12.1f %12.3f %10lld %9.2f %9.3f\n", r.num_streams, r.prompt_tokens,
                r.rows_per_stream, r.times.median(), r.times.p90(),
                s > 0 ? r.num_streams * static_cast<double>(r.prompt_tokens) / s : 0,
                calls_per_rep > 0 ? r.times.median() / calls_per_rep : 0, static_cast<long long>(r.num_forward_calls),
                achieved_gb_per_s(r), achieved_tflop_per_s(r));
  }
}

nlohmann::json rows_to_json(const std::vector<BenchRow>& rows, bool prefill, double copy_gb_per_s) {
  nlohmann::json list = nlohmann::json::array();
  for (const BenchRow& r : rows) {
    const double s = r.times.median() / 1e3;
    nlohmann::json j = {{"streams", r.num_streams},
                        {"forward_calls", r.num_forward_calls},
                        {"ms_p50", r.times.median()},
                        {"ms_p90", r.times.p90()},
                        {"ms_mean", r.times.mean()},
                        {"ms", r.times.ms}};
    if (prefill) {
      j["prompt_tokens"] = r.prompt_tokens;
      j["chunk_tokens"] = r.rows_per_stream;
      j["tokens_per_s"] = s > 0 ? r.num_streams * static_cast<double>(r.prompt_tokens) / s : 0;
    } else {
      j["rows_per_stream"] = r.rows_per_stream;
      j["kept_per_stream"] = r.kept_per_stream;
      j["tokens_per_s"] = s > 0 ? r.num_streams * r.kept_per_stream / s : 0;
      j["tokens_per_s_per_stream"] = s > 0 ? r.kept_per_stream / s : 0;
      j["context_fill_tokens_per_s"] = r.fill_tokens_per_s;
    }
    if (r.min_bytes > 0) {
      j[prefill ? "min_bytes_per_prompt" : "min_bytes_per_step"] = r.min_bytes;
      j["gb_per_s"] = achieved_gb_per_s(r);
      if (copy_gb_per_s > 0) j["percent_of_copy"] = 100.0 * achieved_gb_per_s(r) / copy_gb_per_s;
    }
    if (r.flops > 0) {
      j[prefill ? "flops_per_prompt" : "flops_per_step"] = r.flops;
      j["tflop_per_s"] = achieved_tflop_per_s(r);
    }
    if (r.launches_per_step >= 0) j["launches_per_step"] = r.launches_per_step;
    if (r.trace.num_steps > 0) j["trace"] = trace_to_json(r, prefill);
    list.push_back(std::move(j));
  }
  return list;
}

}  // namespace deltaserve::cli
