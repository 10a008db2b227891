// `deltaserve bench decode --acceptance A1,A2,..`: decode with speculation whose drafts are
// accepted at random with the given per-position rates (A_j: draft j accepted given drafts
// 1..j-1 were), so the speculation policy can be shown on synthetic weights, where real drafts
// would never match. Each step does what a served speculative step does on the device: the MTP
// chain passes for drafts 2.. (the model's MTP head), the verify forward of 1 + d_i rows per
// stream with row states, the rollback to the accepted rows, and the MTP catch-up pass over the
// rows of the streams that drafted (a stream at depth 0 leaves its rows waiting, and catches them
// up in one pass before it drafts again: runtime/mtp_drafter.h's lazy catch-up).
// Depth modes: "off" (no speculation: no MTP work at all), a fixed depth for every stream (0: the
// trunk's hidden rows copied out and left waiting, as a speculating server whose policy drafts
// nothing), or "policy"
// (scheduler/draft_policy.h over a cost table measured first on this backend, per-stream
// acceptance learned from the simulated outcomes as the scheduler learns it). Single-threaded;
// blocks for the whole run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_runs.h"
#include "runtime/backend.h"
#include "runtime/step_cost_table.h"

namespace deltaserve::cli {

struct SpeculationRow {
  int32_t num_streams = 0;
  std::string mode;            // "off", "policy" or the fixed depth
  StepTimes times;             // per step, ms (drafting, verify, rollback, catch-up)
  int64_t num_tokens = 0;      // emitted over the timed steps, all streams
  int64_t num_drafted = 0;     // draft rows over the timed steps
  int64_t num_accepted = 0;
  double predicted_ms = 0;     // policy only: the cost model's mean prediction per step
  double tokens_per_s() const;
};

// The deepest draft any mode asks for (the backend's verify rows must cover 1 + it).
int32_t speculation_max_depth(const BenchOptions& o);

// Measures the cost table (printing a summary line; returned in costs for the JSON record, so
// `bench policy` can replay it), then runs every (streams, mode) cell.
std::vector<SpeculationRow> run_speculation(runtime::Backend& backend, const BenchOptions& o,
                                            std::shared_ptr<const runtime::StepCostTable>& costs);

// Tokens/s per cell, and its ratio to speculation off of the same streams (else depth 0).
void print_speculation_table(const std::vector<SpeculationRow>& rows);
nlohmann::json speculation_to_json(const std::vector<SpeculationRow>& rows);

}  // namespace deltaserve::cli
