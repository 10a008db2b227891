// The speculation policy: how many MTP drafts each decoding stream carries this step.
//
// Model (docs/speculation.md). Stream i at depth d emits in expectation
//   E_i(d) = 1 + sum_{j=1..d} prod_{k=1..j} a_ik
// tokens, where a_ik is its acceptance of draft position k given 1..k-1 accepted (its own
// evidence shrunk toward its request kind's estimate: AcceptanceEstimates below). The step's
// time is predicted from the device's measured StepCostTable: the trunk forward of all decode
// rows (S streams, S + sum d_i rows), plus one MTP pass per chained draft position (draft 1
// comes out of the previous step's catch-up pass, draft j >= 2 needs chain pass j - 1 over the
// streams drafting that deep), plus the catch-up pass itself. The policy maximises
// sum_i E_i(d_i) / predicted time.
//
// Allocation: every candidate draft row (i, j) is worth p_ij = prod_{k<=j} a_ik tokens, which
// falls with j, so sorting all candidates by p_ij (then j) lists each stream's rows in order.
// The policy adds rows in that order (the best marginal tokens for nearly the same marginal
// cost: a row costs the same whichever stream carries it, but for a new chain-pass member) and
// keeps the prefix with the best tokens per second, so a cost curve with a step in it (a tile
// boundary) is crossed when the rows past it pay. Bounded by each stream's limit (--draft-depth,
// the request's draft_depth, max_tokens, the context) and by the step's row budget.
//
// Stickiness: neighbouring depths often differ by only a few % in rate, less than the noise
// of any estimate, so a policy that follows the estimate exactly moves a stream's depth back
// and forth and pays the rows of the worse depth about half the time. Rows the stream carried
// last step are valued kDepthStickiness above their estimate, rows it did not below it: a
// depth changes only when the estimate moves past that margin, and a near-tie costs at most
// the margin's share of one row.
//
// Without a cost table (tests with a fake runner) every row costs the same: each stream drafts
// to its limit. In both cases a draft expected to survive less than min_expected is never made.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/model_runner.h"
#include "runtime/sampling_params.h"
#include "runtime/step_cost_table.h"

namespace deltaserve::scheduler {

// Acceptance of draft position j (0-based) given positions 0..j-1 were accepted.
using DraftAcceptance = std::array<double, runtime::kMaxDraftDepth>;

// Request kinds whose drafts are accepted differently, each with its own running estimate.
enum class DraftKind : int32_t { kGreedy = 0, kSampled = 1, kConstrained = 2 };
inline constexpr int32_t kNumDraftKinds = 3;
DraftKind draft_kind(const runtime::SamplingParams& sampling);
const char* draft_kind_name(DraftKind kind);

// One decoding stream as the policy sees it.
struct DraftStream {
  int32_t limit = 0;                           // drafts at most (0: this stream does not draft)
  const DraftAcceptance* acceptance = nullptr;  // required when limit > 0
  int32_t previous_depth = -1;                 // its depth last step; -1: none (no stickiness)
};

class DraftPolicy {
 public:
  // costs may be null (flat costs). A table with an MTP grid also prices the MTP passes
  // (chain and catch-up); one without prices the trunk only.
  DraftPolicy(std::shared_ptr<const runtime::StepCostTable> costs, double min_expected);

  // Fills depths (one per stream) with the choice; at most max_draft_rows drafts in all.
  // Returns the predicted time (ms) of the decode part of the step (0 without a cost table).
  double choose(std::span<const DraftStream> streams, int32_t max_draft_rows, std::vector<int32_t>& depths) const;

  // Predicted time (ms) of a step with these decode depths (one per decoding stream) and
  // prefill_rows more rows in prefill_sequences more sequences; 0 without a cost table.
  double predict_ms(std::span<const int32_t> depths, int32_t prefill_sequences, int64_t prefill_rows) const;

  bool has_costs() const { return costs_ != nullptr && !costs_->empty(); }
  // Relative bonus of a row the stream carried last step, and malus of one it did not.
  static constexpr double kDepthStickiness = 0.05;
  const runtime::StepCostTable* costs() const { return costs_.get(); }

 private:
  std::shared_ptr<const runtime::StepCostTable> costs_;
  double min_expected_;
};

// One stream's evidence about its drafts: per position, how many verify steps reached it and
// how many of those accepted it, both decayed by AcceptanceEstimates::kStreamDecay per decode
// step. Kept in the stream's Sequence.
struct DraftEvidence {
  DraftAcceptance reached{};
  DraftAcceptance accepted{};
};

// Acceptance estimates: each stream's own evidence, and one estimate per request kind, which
// is every stream's prior.
//
// A stream's estimate of position j is the posterior mean of a Beta whose prior is its kind's
// estimate worth kStreamPriorWeight observations:
//   a_j = (accepted_j + w q_j) / (reached_j + w).
// Deep positions are reached in only some steps (position 3 of 0.8/0.6/0.45 in one step of
// two), so their own counts stay small and they lean on the kind, which pools every stream of
// the kind; a position that one unlucky run made look poor no longer swings the depth. The
// counts decay every decode step, whether or not the stream drafted: evidence about a position
// the policy stopped drafting fades and the estimate returns to the kind's, so a stream is
// never stuck at a depth by an estimate that no step can correct any more (an exponential
// average that learns only when a position is reached freezes every low reading).
//
// A kind's estimate is the decayed mean of all its streams' observations (kKindDecay per
// observation), with the starting prior worth one observation: prior 1.0 makes new kinds try
// drafting, and the first observations replace it at once.
class AcceptanceEstimates {
 public:
  // prior: every kind's starting acceptance at every position.
  explicit AcceptanceEstimates(double prior = 1.0);
  // The kind's current estimate (what a stream without evidence uses).
  DraftAcceptance seed(DraftKind kind) const;
  // A stream's estimate from its evidence and its kind's.
  DraftAcceptance estimate(DraftKind kind, const DraftEvidence& stream) const;
  // One decode step of a stream that may draft: num_drafted drafts (0 included: the step
  // still ages the stream's evidence), the first num_accepted kept.
  void record(DraftKind kind, DraftEvidence& stream, int32_t num_drafted, int32_t num_accepted);

  // A stream's evidence halves in about 35 decode steps: it follows a change in its text
  // within a few dozen steps; the kind's estimate steadies what that window leaves noisy.
  static constexpr double kStreamDecay = 0.98;
  static constexpr double kStreamPriorWeight = 8.0;
  static constexpr double kKindDecay = 0.995;

 private:
  double prior_;
  std::array<DraftEvidence, kNumDraftKinds> by_kind_{};
};

}  // namespace deltaserve::scheduler
