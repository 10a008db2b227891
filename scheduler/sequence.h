// One request's state inside the scheduler (internal to scheduler/).
//
// History model (vLLM's num_computed_tokens): `tokens` is prompt + emitted tokens; the
// first num_computed_tokens of them are in the sequence's state slot and KV blocks. Each
// step computes tokens[num_computed..) (or a chunk of it); the step that reaches the end
// samples the next token. Decode is the case of one missing token. Preemption by
// recompute only resets num_computed_tokens to 0: the generated tokens stay in `tokens`,
// so the recomputed sequence continues exactly where it stopped (no token lost or
// repeated), and its next output index is unchanged (seeded sampling stays the same).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/model_runner.h"
#include "scheduler/draft_policy.h"
#include "scheduler/request.h"

namespace deltaserve::scheduler {

using TimePoint = std::chrono::steady_clock::time_point;

struct Sequence {
  RequestId id = 0;
  RequestSpec spec;  // prompt_tokens moved out into `tokens`
  EventSink sink;

  std::vector<int32_t> tokens;  // prompt + emitted
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;  // in slot + KV

  int32_t slot = -1;               // -1 while waiting
  std::vector<int32_t> kv_blocks;  // empty while waiting
  uint64_t admit_order = 0;        // larger = admitted later (preemption victim first)
  int32_t num_cached_prompt_tokens = -1;  // tokens the prefix cache supplied at the first admission
  // Prompt positions where waiting requests that share the prompt up to there asked for a
  // prefill checkpoint (in-flight sharing, scheduler_prefix.cpp); passed ones are inert.
  std::vector<int32_t> shared_cuts;

  TimePoint submit_time{};
  TimePoint first_scheduled_time{};
  TimePoint first_token_time{};
  TimePoint last_token_time{};
  // What its verify steps showed of each draft position, and the estimate the policy last
  // used (its evidence shrunk toward its kind's: scheduler/draft_policy.h AcceptanceEstimates).
  DraftEvidence draft_evidence;
  DraftAcceptance draft_acceptance{};
  int32_t draft_depth_last = -1;  // the policy's choice at its last decode step; -1: none yet
  DraftKind draft_kind = DraftKind::kGreedy;
  bool was_scheduled = false;
  bool has_first_token = false;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  int32_t num_missing_tokens() const { return num_tokens() - num_computed_tokens; }
  bool is_decoding() const { return num_generated() > 0 && num_missing_tokens() == 1; }
};

}  // namespace deltaserve::scheduler
