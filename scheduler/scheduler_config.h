// Scheduling knobs (one typed struct, STYLE "config/"): parsed by the server's config,
// resolved against the runner's limits once at engine construction, then const.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/model_runner.h"
#include "runtime/step_cost_table.h"

namespace deltaserve::scheduler {

struct SchedulerConfig {
  int32_t max_num_seqs = 0;                // running sequences at most; 0 = one per state slot
  int32_t max_num_batched_tokens = 2048;   // rows per step: decode + draft + prefill
  int32_t max_prefill_chunk_tokens = 512;  // prompt tokens of one sequence per step
  int32_t max_num_waiting = 256;           // requests waiting for a running place beyond which submit is QueueFull
  int32_t max_context_tokens = 0;          // prompt + generated; 0 = runner's window capped
                                           // by the KV pool
  // Speculation (MTP drafts verified in the same step as the decode row; the depths come from
  // the policy of scheduler/draft_policy.h, within the step's row budget).
  int32_t max_draft_depth = -1;    // drafts per stream per step at most; -1 = the runner's limit
  // A stream never drafts position j when its running acceptance makes the drafts 1..j
  // expected to survive less often than this (the product of per-position acceptance).
  double draft_min_expected = 0.05;
  // Starting acceptance of every request kind at every position (optimistic: new streams try).
  double draft_acceptance_prior = 1.0;
  // The device's measured step costs (runtime/step_cost_probe.h); null: every row costs the
  // same, so each stream drafts to its limit (tests with a fake runner).
  std::shared_ptr<const runtime::StepCostTable> step_costs;
  // Prefix cache (docs/prefix-cache.md). Off unless asked for and the runner keeps
  // checkpoints (RunnerLimits::checkpoint_bytes > 0).
  bool prefix_cache = false;
  int64_t prefix_cache_device_bytes = int64_t{1} << 30;  // checkpoints next to the state slots
  int64_t prefix_cache_host_bytes = int64_t{4} << 30;    // checkpoints in page-locked host memory
  // A checkpoint every this many tokens of a prefill (chunks are cut there); 0 = only at the
  // end of prompts and requests. Rounded up to a multiple of the runner's prefill_chunk_align.
  int32_t prefix_checkpoint_tokens = 2048;
  // Resolved: checkpoint buffers per tier (budget / checkpoint bytes); both 0 = cache off.
  int32_t prefix_device_checkpoints = 0;
  int32_t prefix_host_checkpoints = 0;
};

// Fills every `auto` (0) from the runner's limits and validates the result. Throws
// std::invalid_argument naming the field when a value is out of range, in particular:
// - max_num_batched_tokens < max_num_seqs (every running sequence must get its decode row
//   each step, so prefill can never starve decode);
// - max_context_tokens larger than the KV pool (a sequence alone must always fit, which is
//   what guarantees that preemption always makes progress) or than the model's window.
SchedulerConfig resolve_config(const SchedulerConfig& requested, const runtime::RunnerLimits& limits);

}  // namespace deltaserve::scheduler
