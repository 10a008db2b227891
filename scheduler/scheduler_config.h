// Scheduling knobs (one typed struct, STYLE "config/"): parsed by the server's config,
// resolved against the runner's limits once at engine construction, then const.
#pragma once

#include <cstdint>

#include "runtime/model_runner.h"

namespace deltaserve::scheduler {

struct SchedulerConfig {
  int32_t max_num_seqs = 0;                // running sequences at most; 0 = one per state slot
  int32_t max_num_batched_tokens = 2048;   // rows per step: decode + draft + prefill
  int32_t max_prefill_chunk_tokens = 512;  // prompt tokens of one sequence per step
  int32_t max_num_waiting = 256;           // requests waiting for a running place beyond which submit is QueueFull
  int32_t max_context_tokens = 0;          // prompt + generated; 0 = runner's window capped
                                           // by the KV pool
  // Speculation (MTP drafts verified in the same step as the decode row).
  int32_t max_draft_depth = -1;    // drafts per stream per step at most; -1 = the runner's limit
  // A stream drafts position j only while its running acceptance makes the drafts 1..j
  // expected to survive at least this often (the product of per-position acceptance).
  double draft_min_expected = 0.3;
  // Load: decode + draft rows of one step at most. Verify rows are nearly free while a step
  // is bandwidth-bound and cost real time once it is compute-bound; depths shrink past this.
  int32_t draft_max_rows = 256;
};

// Fills every `auto` (0) from the runner's limits and validates the result. Throws
// std::invalid_argument naming the field when a value is out of range, in particular:
// - max_num_batched_tokens < max_num_seqs (every running sequence must get its decode row
//   each step, so prefill can never starve decode);
// - max_context_tokens larger than the KV pool (a sequence alone must always fit, which is
//   what guarantees that preemption always makes progress) or than the model's window.
SchedulerConfig resolve_config(const SchedulerConfig& requested, const runtime::RunnerLimits& limits);

}  // namespace deltaserve::scheduler
