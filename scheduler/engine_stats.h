// What the engine loop reports to the outside (metrics, /ready, logs) without knowing who
// listens: the server implements EngineObserver on top of prometheus-cpp. All callbacks run
// on the engine thread and must be cheap and non-blocking.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/model_runner.h"
#include "scheduler/request.h"

namespace deltaserve::scheduler {

// A point-in-time view of capacity, cheap to copy; read from any thread via Engine::stats().
struct EngineStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t num_state_slots_used = 0;
  int32_t num_state_slots_total = 0;
  int32_t num_kv_blocks_used = 0;    // held by requests (the prefix cache's own blocks not counted)
  int32_t num_kv_blocks_cached = 0;  // held only by the prefix cache: reclaimed (evicted) on demand
  int32_t num_kv_blocks_total = 0;
  uint64_t num_steps = 0;
  uint64_t num_preemptions = 0;
  uint64_t num_cancellations = 0;
  int64_t pinned_bytes = 0;          // host memory registered with the device (0 on CPU)
  int64_t pinned_registrations = 0;
  int64_t device_bytes_used = 0;     // device memory the backend holds (0 on CPU)
  int64_t device_bytes_total = 0;    // the device's capacity (0 on CPU)
  // Per device of a layer split: layers, memory, the activation hop into it (cumulative).
  std::vector<runtime::SplitDeviceStats> split_devices;
  // Prefix cache (docs/prefix-cache.md); all 0 while it is off.
  bool prefix_cache_enabled = false;
  uint64_t prefix_cache_queries = 0;        // requests' first admissions, which looked it up
  uint64_t prefix_cache_hits = 0;           // ... and resumed from a checkpoint
  uint64_t prefix_cache_query_tokens = 0;   // tokens of those admissions
  uint64_t prefix_cache_hit_tokens = 0;     // tokens they did not compute
  // The same for re-admissions of preempted sequences (not prefix sharing: PrefixCacheStats).
  uint64_t prefix_cache_preempted_queries = 0;
  uint64_t prefix_cache_preempted_hits = 0;
  uint64_t prefix_cache_preempted_query_tokens = 0;
  uint64_t prefix_cache_preempted_hit_tokens = 0;
  uint64_t prefix_cache_evictions = 0;      // checkpoints dropped (budget, KV pressure, reset)
  uint64_t prefix_cache_spills = 0;         // checkpoints moved from the device to the host tier
  int32_t prefix_cache_checkpoints = 0;
  int32_t prefix_cache_blocks = 0;          // full KV blocks the index holds
  int64_t prefix_cache_device_bytes = 0;    // checkpoint bytes held per tier
  int64_t prefix_cache_host_bytes = 0;
};

struct StepReport {
  double step_ms = 0.0;
  int32_t num_rows = 0;            // rows in the plan (prefill + decode + verify)
  int32_t num_decode_sequences = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_generated_tokens = 0;  // tokens emitted this step (all sequences)
  // The speculation policy's prediction of this step's forward time (ms) from the measured
  // step costs; 0 when there is no cost table or the step carried prefill rows.
  double predicted_step_ms = 0.0;
  // Decoding streams that may draft, by the depth the policy chose for them this step.
  std::array<int32_t, runtime::kMaxDraftDepth + 1> draft_depths{};
};

struct RequestReport {
  RequestId id = 0;
  FinishReason finish = FinishReason::None;
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;
  double queue_ms = 0.0;      // submit -> first scheduled
  double ttft_ms = 0.0;       // submit -> first token
  double e2e_ms = 0.0;        // submit -> finish
  double decode_tokens_per_s = 0.0;  // generated after the first / time after the first
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_step(const StepReport&) {}
  // One call per emitted token after the first of a request: the gap since the previous
  // token of that request (tokens accepted together share a step: gaps spread evenly).
  virtual void on_inter_token(RequestId, double gap_ms) { (void)gap_ms; }
  virtual void on_request_finished(const RequestReport&) {}
  // Something the engine cannot fix by itself (a runner exception, a failed idle integrity
  // check of the slot/block accounting): log it at error level, never filtered.
  virtual void on_engine_error(const std::string& message) { (void)message; }
  // Speculation (filled by the speculation work): position is 0-based draft index.
  virtual void on_drafts(int32_t position, int32_t num_drafted, int32_t num_accepted) {
    (void)position; (void)num_drafted; (void)num_accepted;
  }
};

}  // namespace deltaserve::scheduler
