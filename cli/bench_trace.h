// The --trace tables of `deltaserve bench decode|prefill`: per cell, the kernel classes of the
// traced pass (bench_runs.h, BenchTrace) with launches and device time per step (decode) or
// per prompt (prefill), per token, their share of the traced total, and the traced total
// against the untraced step time (the tracing overhead). Called from the command's thread.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_runs.h"
#include "runtime/gpu/kernel_class_time.h"

namespace deltaserve::cli {

// Adds one take of the kernel trace into the pass's totals (classes matched by name).
void add_trace(BenchTrace& trace, const std::vector<runtime::gpu::KernelClassTime>& classes);

// One table per traced row (rows without a trace are skipped).
void print_trace_tables(const std::vector<BenchRow>& rows, bool prefill);

// The trace of one row, per step (decode) or per prompt (prefill).
nlohmann::json trace_to_json(const BenchRow& row, bool prefill);

}  // namespace deltaserve::cli
