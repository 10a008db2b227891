// The --trace tables and JSON of `deltaserve bench` (see bench_trace.h).
#include "cli/bench_trace.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace deltaserve::cli {
namespace {

using runtime::gpu::KernelClassTime;

// Per step (decode) or per prompt (prefill): what the trace's totals are divided by.
struct TraceUnits {
  const char* unit;       // "step" or "prompt"
  double num_units = 1;   // traced steps or prompts
  double tokens = 1;      // tokens one unit adds (decode: kept rows of every stream)
  double untraced_ms = 0; // the untraced median of one unit
};

TraceUnits units_of(const BenchRow& r, bool prefill) {
  TraceUnits u;
  u.unit = prefill ? "prompt" : "step";
  u.num_units = std::max(1, r.trace.num_steps);
  u.tokens = prefill ? static_cast<double>(r.num_streams) * r.prompt_tokens
                     : static_cast<double>(r.num_streams) * r.kept_per_stream;
  u.tokens = std::max(u.tokens, 1.0);
  u.untraced_ms = r.times.median();
  return u;
}

// The classes by device time, longest first.
std::vector<KernelClassTime> by_time(const BenchTrace& t) {
  std::vector<KernelClassTime> classes = t.classes;
  std::stable_sort(classes.begin(), classes.end(),
                   [](const KernelClassTime& a, const KernelClassTime& b) { return a.microseconds > b.microseconds; });
  return classes;
}

KernelClassTime total_of(const BenchTrace& t) {
  KernelClassTime total;
  total.name = "total";
  for (const KernelClassTime& c : t.classes) {
    total.num_launches += c.num_launches;
    total.num_calls += c.num_calls;
    total.microseconds += c.microseconds;
  }
  return total;
}

void print_class_line(const KernelClassTime& c, const TraceUnits& u, double total_us) {
  std::printf("  %-24s %16.1f %14.1f %12.2f %8.1f%%\n", c.name.c_str(), static_cast<double>(c.num_launches) / u.num_units,
              c.microseconds / u.num_units, c.microseconds / u.num_units / u.tokens,
              total_us > 0 ? 100.0 * c.microseconds / total_us : 0.0);
}

void print_trace_table(const BenchRow& r, bool prefill) {
  const TraceUnits u = units_of(r, prefill);
  const KernelClassTime total = total_of(r.trace);
  if (prefill)
    std::printf("trace: %d stream(s), prompt %d in chunks of %d: one traced prompt\n", r.num_streams, r.prompt_tokens,
                r.rows_per_stream);
  else
    std::printf("trace: %d stream(s) x %d row(s): %d traced steps\n", r.num_streams, r.rows_per_stream, r.trace.num_steps);
  char launches[24], us[24];
  std::snprintf(launches, sizeof(launches), "launches/%s", u.unit);
  std::snprintf(us, sizeof(us), "us/%s", u.unit);
  std::printf("  %-24s %16s %14s %12s %9s\n", "kernel class", launches, us, "us/token", "share");
  for (const KernelClassTime& c : by_time(r.trace)) print_class_line(c, u, total.microseconds);
  print_class_line(total, u, total.microseconds);
  const double kernel_ms = total.microseconds / 1e3 / u.num_units, wall_ms = r.trace.wall_ms / u.num_units;
  std::printf("  traced: kernels %.3f ms/%s, wall %.3f ms/%s; untraced p50 %.3f ms/%s (the traced pass, eager with "
              "events, took %+.3f ms/%s more)\n",
              kernel_ms, u.unit, wall_ms, u.unit, u.untraced_ms, u.unit, wall_ms - u.untraced_ms, u.unit);
}

}  // namespace

void add_trace(BenchTrace& trace, const std::vector<KernelClassTime>& classes) {
  for (const KernelClassTime& c : classes) {
    auto it = std::find_if(trace.classes.begin(), trace.classes.end(),
                           [&](const KernelClassTime& t) { return t.name == c.name; });
    if (it == trace.classes.end()) {
      trace.classes.push_back(c);
      continue;
    }
    it->num_launches += c.num_launches;
    it->num_calls += c.num_calls;
    it->microseconds += c.microseconds;
  }
}

void print_trace_tables(const std::vector<BenchRow>& rows, bool prefill) {
  bool first = true;
  for (const BenchRow& r : rows) {
    if (r.trace.num_steps == 0) continue;
    if (first)
      std::printf("\nkernel trace: eager launches (step graphs off while tracing); time = device time between the "
                  "event pair around each launch\n(a small kernel may include its launch latency), summed per class\n");
    first = false;
    std::printf("\n");
    print_trace_table(r, prefill);
  }
}

nlohmann::json trace_to_json(const BenchRow& r, bool prefill) {
  const TraceUnits u = units_of(r, prefill);
  const std::string per = std::string("_per_") + u.unit;
  nlohmann::json classes = nlohmann::json::array();
  for (const KernelClassTime& c : by_time(r.trace))
    classes.push_back({{"class", c.name},
                       {"launches" + per, static_cast<double>(c.num_launches) / u.num_units},
                       {"calls" + per, static_cast<double>(c.num_calls) / u.num_units},
                       {"us" + per, c.microseconds / u.num_units},
                       {"us_per_token", c.microseconds / u.num_units / u.tokens}});
  const KernelClassTime total = total_of(r.trace);
  return {{"traced_" + std::string(u.unit) + "s", r.trace.num_steps},
          {"eager", true},
          {"kernel_ms" + per, total.microseconds / 1e3 / u.num_units},
          {"wall_ms" + per, r.trace.wall_ms / u.num_units},
          {"untraced_ms" + per + "_p50", u.untraced_ms},
          {"launches" + per, static_cast<double>(total.num_launches) / u.num_units},
          {"classes", classes}};
}

}  // namespace deltaserve::cli
