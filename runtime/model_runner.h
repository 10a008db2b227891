// The seam between the scheduler and the runtime: the scheduler plans, the runtime executes.
// Once per step the engine thread hands a StepPlan to ModelRunner::execute() and reads back
// one SequenceOutput per planned sequence. The real runner (runtime/backend_runner.h: the
// backend's forward pass, sampling and draft verification) implements it here in runtime/;
// tests/scheduler/fake_runner.h scripts results instead.
//
// Owner: the Engine; every method is called on the engine thread only, one call at a time.
// execute() blocks for the forward pass; the engine holds no lock while it runs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/batch_plan.h"
#include "runtime/sampling_params.h"
#include "runtime/request_id.h"

namespace deltaserve::runtime {

// What the runner can hold; read once when the engine is built.
// Drafts per sequence per step that any runner may verify (sizes per-position statistics).
inline constexpr int32_t kMaxDraftDepth = 15;  // a DFlash block of 16: the anchor and 15 drafts

struct RunnerLimits {
  CacheConfig cache;      // state slots, tokens per KV block, KV blocks
  int32_t max_context_tokens = 0;  // the model's window; 0 = bounded by the KV pool only
  int32_t num_vocab = 0;           // prompt ids must be below it; 0 = not checked
  int32_t max_draft_depth = 0;     // draft rows the runner can verify per sequence
  // Prompt chunks that do not finish their sequence end on a multiple of this many positions
  // and leave at least this many rows (Backend::prefill_chunk_align).
  int32_t prefill_chunk_align = 1;
  // Bytes of one prefix-cache checkpoint (runtime::Backend::checkpoint_bytes); 0 = the runner
  // keeps none and the prefix cache stays off.
  int64_t checkpoint_bytes = 0;
};

// Memory the runner's backend holds (BackendMemoryStats), flat across requests
// once loaded. Read once per engine step, so producing it must be cheap.
struct RunnerStats {
  int64_t device_bytes_used = 0;   // weights, caches, workspaces on the device (0 on the CPU)
  int64_t device_bytes_total = 0;  // the device's capacity (0 on the CPU)
  int64_t pinned_bytes = 0;        // page-locked host memory
  int64_t pinned_registrations = 0;
  // Per device of a layer split (Backend::split_stats); empty on one device.
  std::vector<SplitDeviceStats> split_devices;
};

// One sequence's share of a step. Rows are tokens[0..n) at positions
// [num_cached_tokens, num_cached_tokens + n). All spans point into the scheduler's own
// storage and stay valid until the engine commits the step (after execute() returns).
struct SequencePlan {
  RequestId id = 0;
  int32_t slot = 0;               // recurrent-state slot
  int32_t num_cached_tokens = 0;  // 0 = fresh or recomputed sequence: reset the slot
  std::span<const int32_t> tokens;     // this step's rows = history[num_cached, +n)
  std::span<const int32_t> kv_blocks;  // covers [0, num_cached + n + draft_depth)
  bool sample = false;   // the rows end the known history: emit the next token(s)
  bool is_decode = false;  // one row after generated tokens (else a prompt/recompute chunk)
  // Draft rows the runner may append after tokens for verification (budget and KV blocks
  // are reserved for them): chosen per stream by the scheduler's speculation policy.
  int32_t draft_depth = 0;
  // The request allows speculation: the runner keeps its draft head in step with this
  // sequence (from its first prompt row), so drafting can start on any decode step.
  bool speculative = false;

  // Sampling context (read when sample is true).
  const SamplingParams* sampling = nullptr;
  std::span<const int32_t> history;  // prompt + generated so far (penalties)
  int32_t num_prompt_tokens = 0;     // history[num_prompt_tokens..] are output tokens
  int32_t output_index = 0;          // index of the next output token: the seeded RNG key
                                     // (seed, output_index) survives batching and preemption
};

struct StepPlan {
  // Decode sequences first, then prefill chunks; each group in admission order.
  std::vector<SequencePlan> sequences;
  // Prefix-cache copies (docs/prefix-cache.md) the runner applies in order before the step's
  // forward (runtime::Backend::apply_cache_ops): saves and spills decided at the previous
  // commits, then the copy-on-write blocks and restores of this step's admissions.
  std::vector<runtime::CacheOp> cache_ops;

  bool empty() const { return sequences.empty(); }
  int64_t num_rows() const;  // tokens + reserved draft rows, all sequences
};

// Parallel to StepPlan::sequences. For a sequence with sample == false the runner leaves
// tokens empty.
struct SequenceOutput {
  // Emitted tokens: exactly 1 without drafts; 1 + accepted drafts with them (at most
  // 1 + draft_depth). The scheduler applies stop ids and limits to them in order.
  std::vector<int32_t> tokens;
  std::vector<OutputLogprob> logprobs;  // parallel to tokens when sampling->logprobs
  int32_t num_drafted = 0;  // draft rows actually verified (<= draft_depth); tokens.size() - 1
                            // of them were accepted
  std::string error;  // non-empty: this sequence failed; it ends with FinishReason::Error
};

struct StepOutput {
  std::vector<SequenceOutput> sequences;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual RunnerLimits limits() const = 0;
  // Runs the plan and fills out.sequences (already sized to the plan, entries cleared).
  // Sequences are independent: a sequence's result never depends on the others in the plan.
  // An exception ends every sequence of the plan with FinishReason::Error.
  virtual void execute(const StepPlan& plan, StepOutput& out) = 0;
  virtual RunnerStats stats() const { return {}; }
  // Called once by the engine before the first step when the prefix cache is on: room for
  // this many checkpoints per tier (runtime::Backend::reserve_checkpoints).
  virtual void reserve_checkpoints(int32_t num_device, int32_t num_host) { (void)num_device; (void)num_host; }
};

// The backend's view of a plan (copies rows and block tables; num_logits = 1 + draft_depth
// when sampling, else 0). Draft rows are the runner's to append.
BatchPlan to_batch_plan(const StepPlan& plan);

}  // namespace deltaserve::runtime
