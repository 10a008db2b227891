// The real ModelRunner: executes the scheduler's StepPlan on a Backend, picks each
// sampled sequence's tokens with the CPU reference sampler, and verifies MTP drafts.
// Owned by the daemon, called on the engine thread only. Drafts come from the model's MTP
// head (runtime/mtp_drafter.h) or a DFlash block drafter (runtime/dflash_drafter.h); both
// verify in the same packed step and roll back by index.
//
// Verification (runtime/draft_verifier.h): greedy requests accept drafts while they equal
// the target argmax, so their output with speculation is token for token the output without
// it. Sampled requests whose rows need only the draw rule (only_draw_needed: most of them)
// are drawn by the backend (on a GPU, on the device: only ids come back) and verify the same
// exact way: each draft is the head's draw with the uniform of the target row at the same
// output position (a coupled draft), accepted while it equals the target's own draw; their
// output is token for token the output without drafts. The others (bias, penalties, a
// constraint, logprobs) are sampled on the host; seeded ones draw coupled drafts too, and
// unseeded ones use standard speculative sampling: each draft drawn from the head's
// distribution q (the Draft stream of its seed), kept for the step, accepted with probability
// min(1, p/q), a rejection emitting a draw from the residual; their output keeps its
// distribution (not its tokens) and is a function of the request and of the draft depths
// the scheduler chose, never of the batch.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "runtime/backend.h"
#include "runtime/sampler.h"
#include "runtime/thread_pool.h"
#include "runtime/model_runner.h"
#include "runtime/dflash_drafter.h"
#include "runtime/mtp_drafter.h"
#include "runtime/mtp_resume_rows.h"

namespace deltaserve::runtime {

class BackendRunner final : public ModelRunner {
 public:
  // The backend must outlive the runner. max_context_tokens 0 = the model's trained length.
  // max_draft_depth > 0 enables MTP drafting (the model needs an MTP head and the backend
  // max_verify_rows >= 1 + max_draft_depth; throws std::invalid_argument otherwise).
  // dflash: draft with a DFlash block drafter (runtime/dflash_drafter.h) instead of the MTP
  // head; then the model needs no MTP head, and max_draft_depth must not exceed its
  // max_drafts(). The backend must capture trunk layers (the CPU and GPU backends do; a layer
  // split does not).
  BackendRunner(Backend& backend, int32_t max_context_tokens, int32_t max_draft_depth = 0,
                std::unique_ptr<DFlashDrafter> dflash = nullptr);

  RunnerLimits limits() const override;
  void execute(const StepPlan& plan, StepOutput& out) override;
  // The backend's memory_stats(), as the engine publishes it for /metrics.
  RunnerStats stats() const override;
  void reserve_checkpoints(int32_t num_device, int32_t num_host) override;
  // On (the default): requests whose tokens are the plain argmax (runtime/greedy.h's
  // only_argmax_needed) take the backend's argmax_ids and leave their logits on the device;
  // greedy MTP drafts likewise. Off: every sampled row's logits come to the host (the
  // reference path; tests compare the two).
  void set_device_greedy(bool on);
  // On (the default): requests whose tokens are the plain draw rule (only_draw_needed) are
  // drawn by the backend from logits that stay on its device; their MTP drafts likewise.
  // Off: the host sampler draws them from copied logits (the reference path; same tokens).
  void set_backend_draws(bool on);
  // Threads that draw a step's host-sampled rows side by side: up to 8 (the cores' count on
  // smaller hosts); `bench decode --sampled-streams` draws with as many.
  static int num_sampling_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)); }

 private:
  // The request's sampler, in step with its history (rebuilt after preemption or a gap).
  Sampler& sampler_for(const SequencePlan& seq);
  // Draws draft j of plan sequence i (a sampled request) from the head's logits; keeps q.
  int32_t pick_draft(const SequencePlan& seq, size_t i, int32_t j, std::span<const float> head_logits);
  // Verifies a sequence's drafts against its logits rows (or, argmax_only, its argmax ids)
  // and fills its output. first_row: its first logit row.
  std::vector<int32_t> sample_and_verify(const SequencePlan& seq, size_t i, int64_t first_row,
                                         const std::vector<int32_t>& drafts, SequenceOutput& result);
  // Every sampled sequence's tokens of the step (sample_and_verify), the host-sampled ones
  // on sampling_pool_; indexed as plan.sequences.
  std::vector<std::vector<int32_t>> sample_all(const StepPlan& plan, const std::vector<std::vector<int32_t>>& drafts,
                                               StepOutput& out);
  // The sequence's tokens come from argmax_ids (device greedy on, only_argmax_needed).
  bool argmax_only(const SequencePlan& seq) const;
  // The sequence's tokens come from drawn_ids (backend draws on, only_draw_needed).
  bool backend_draws(const SequencePlan& seq) const;
  // Its seed: params.seed, else one drawn per request (seed_salt_).
  uint64_t seed_of(const SequencePlan& seq) const;

  Backend& backend_;
  int32_t max_context_tokens_;
  int32_t max_draft_depth_;
  std::unique_ptr<MtpDrafter> drafter_;  // null without MTP speculation
  std::unique_ptr<DFlashDrafter> dflash_;  // null without DFlash speculation
  MtpResumeRows resume_rows_;            // the MTP row P-1 to re-run after a cache hit
  ForwardOutput forward_;       // reused every step
  bool device_greedy_ = true;
  bool backend_draws_ = true;
  // Samplers of the requests in the last plan; others are dropped (rebuilt on return).
  std::unordered_map<RequestId, std::unique_ptr<Sampler>> samplers_;
  uint64_t seed_salt_;  // unseeded requests: seed = salt ^ request id
  // Host sampling's threads (sample_all, the MTP drafter's pickers): idle while the backend
  // runs, so the CPU backend's own pool and this one never compete.
  ThreadPool sampling_pool_{num_sampling_threads()};

  // A sampled sequence's drafts of the current step: the request's sampler advanced over the
  // drafts so far, and the distribution q of each draft (at most depth x num_vocab doubles;
  // cleared when the step ends).
  struct DraftRows {
    std::optional<Sampler> sampler;
    int32_t num_drafts = 0;
    // Standard speculative sampling (unseeded requests): q per draft. Seeded requests draw
    // coupled drafts and verify exactly, so their output never depends on the draft depth
    // (which falls with load): q stays empty.
    std::vector<TokenDistribution> q;
  };
  std::vector<DraftRows> draft_rows_;  // parallel to the plan's sequences during execute()
};

}  // namespace deltaserve::runtime
