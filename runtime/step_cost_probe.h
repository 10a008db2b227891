// Measures a StepCostTable on a backend: short dummy decode/verify steps (and MTP draft passes)
// on the backend's own state slots and KV blocks, before anything else uses them. The slots are
// left dirty: a sequence's first step resets its slot (num_cached_tokens 0), so nothing leaks.
// Called once at start-up on the engine's thread-to-be (or by `deltaserve bench`); blocks for
// at most about budget_ms (the grid's first row is always measured whole).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/step_cost_table.h"

namespace deltaserve::runtime {

struct StepCostProbeOptions {
  int32_t max_streams = 1;          // the streams grid: 1, 2, 4, ... and this (<= state slots)
  int32_t max_rows_per_stream = 1;  // the rows grid: 1 .. this (1 + the deepest draft), at least 2 measured
  int32_t max_step_rows = 0;        // rows one forward may carry; 0 = the backend's bound only
  double budget_ms = 1500.0;        // measuring stops at the first grid row past this
  int32_t repetitions = 3;          // timed steps per cell (the fastest is kept), after one untimed
  bool mtp = false;                 // also time MTP draft passes (the model needs an MTP head)
};

// The streams grid the probe measures for these options and this backend (ascending).
std::vector<int32_t> step_cost_stream_grid(const Backend& backend, const StepCostProbeOptions& options);

StepCostTable measure_step_costs(Backend& backend, const StepCostProbeOptions& options, StepCostKey key);

// The table of the cache file at cache_path when it holds `key`'s, else one measured now (and
// written to cache_path when that is not empty). Never throws for the file: a file that is
// missing, unreadable, malformed or for another key is measured again and rewritten, and each
// problem is appended to `problems` as one readable line (the caller logs them as errors;
// a missing file is not a problem). from_cache says which way the table came.
StepCostTable load_or_measure_step_costs(Backend& backend, const StepCostProbeOptions& options, const StepCostKey& key,
                                         const std::string& cache_path, std::vector<std::string>& problems,
                                         bool* from_cache = nullptr);

// The key a table for this backend and model is cached under: device name and speed settings,
// the model's path and shapes, the slots and verify rows it was sized for.
StepCostKey step_cost_key(const Backend& backend, const std::string& model_path);

}  // namespace deltaserve::runtime
