// The speculation policy: how many MTP drafts each decoding stream carries this step.
//
// Model (docs/speculation.md). Stream i at depth d emits in expectation
//   E_i(d) = 1 + sum_{j=1..d} prod_{k=1..j} a_ik
// tokens, where a_ik is its acceptance of draft position k given 1..k-1 accepted (a decayed
// running estimate, seeded from its request kind's). The step's time is predicted from the
// device's measured StepCostTable: the trunk forward of all decode rows (S streams, S + sum d_i
// rows), plus one MTP pass per chained draft position (draft 1 comes out of the previous step's
// catch-up pass, draft j >= 2 needs chain pass j - 1 over the streams drafting that deep), plus
// the catch-up pass itself. The policy maximises sum_i E_i(d_i) / predicted time.
//
// Allocation: every candidate draft row (i, j) is worth p_ij = prod_{k<=j} a_ik tokens, which
// falls with j, so sorting all candidates by p_ij (then j) lists each stream's rows in order.
// The policy adds rows in that order (the best marginal tokens for nearly the same marginal
// cost: a row costs the same whichever stream carries it, but for a new chain-pass member) and
// keeps the prefix with the best tokens per second, so a cost curve with a step in it (a tile
// boundary) is crossed when the rows past it pay. Bounded by each stream's limit (--draft-depth,
// the request's draft_depth, max_tokens, the context) and by the step's row budget.
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
  const runtime::StepCostTable* costs() const { return costs_.get(); }

 private:
  std::shared_ptr<const runtime::StepCostTable> costs_;
  double min_expected_;
};

// Running acceptance estimates: one per stream (in its Sequence) and one per request kind,
// which seeds new streams. Both learn only from positions a verify step reached.
class AcceptanceEstimates {
 public:
  // prior: every kind's starting acceptance at every position (optimistic: new kinds try).
  explicit AcceptanceEstimates(double prior = 1.0);
  const DraftAcceptance& seed(DraftKind kind) const { return by_kind_[static_cast<size_t>(kind)]; }
  // A verify step of a stream of this kind: num_drafted drafts, the first num_accepted kept.
  void record(DraftKind kind, DraftAcceptance& stream, int32_t num_drafted, int32_t num_accepted);

  // Decay per observation: a stream follows its own text quickly, a kind drifts slowly.
  static constexpr double kStreamDecay = 0.9;
  static constexpr double kKindDecay = 0.98;

 private:
  std::array<DraftAcceptance, kNumDraftKinds> by_kind_;
};

}  // namespace deltaserve::scheduler
