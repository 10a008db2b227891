#include "scheduler/draft_policy.h"

#include <algorithm>

namespace deltaserve::scheduler {
namespace {

// One candidate draft row: stream i's draft j (1-based), worth p tokens (its survival, with
// the stickiness bonus or malus).
struct Candidate {
  double p = 0.0;
  int32_t stream = 0;
  int32_t depth = 0;
};

// The step's predicted time as draft rows are added one at a time (the MTP chain passes'
// membership counted per pass).
class StepTime {
 public:
  StepTime(const runtime::StepCostTable* costs, int32_t num_streams, int32_t max_depth)
      : costs_(costs), streams_(num_streams), rows_(num_streams), members_(static_cast<size_t>(std::max(1, max_depth)), 0) {}
  // Draft `depth` (1-based) of one stream joins the step. Depth 1 makes the stream a member
  // of the catch-up pass (a stream at depth 0 leaves its rows waiting: runtime/mtp_drafter.h),
  // depth j >= 2 of chain pass j - 1; member k of a pass costs mtp(k) - mtp(k - 1).
  void add(int32_t depth) {
    ++rows_;
    if (costs_ == nullptr) return;
    int32_t& n = members_[static_cast<size_t>(depth - 1)];
    chain_ms_ += costs_->mtp_ms(n + 1) - costs_->mtp_ms(n);
    ++n;
  }
  double ms() const { return costs_ == nullptr ? 1.0 : costs_->trunk_ms(streams_, rows_) + chain_ms_; }

 private:
  const runtime::StepCostTable* costs_;
  int32_t streams_;
  int64_t rows_;
  std::vector<int32_t> members_;  // [0]: streams in the catch-up pass; [k]: in chain pass k
  double chain_ms_ = 0.0;
};

}  // namespace

DraftKind draft_kind(const runtime::SamplingParams& sampling) {
  if (sampling.constraint != nullptr) return DraftKind::kConstrained;
  return sampling.greedy() ? DraftKind::kGreedy : DraftKind::kSampled;
}

const char* draft_kind_name(DraftKind kind) {
  switch (kind) {
    case DraftKind::kGreedy: return "greedy";
    case DraftKind::kSampled: return "sampled";
    case DraftKind::kConstrained: return "constrained";
  }
  return "greedy";
}

DraftPolicy::DraftPolicy(std::shared_ptr<const runtime::StepCostTable> costs, double min_expected)
    : costs_(std::move(costs)), min_expected_(min_expected) {
  if (costs_ != nullptr && costs_->empty()) costs_.reset();
}

double DraftPolicy::choose(std::span<const DraftStream> streams, int32_t max_draft_rows, std::vector<int32_t>& depths) const {
  depths.assign(streams.size(), 0);
  if (streams.empty()) return 0.0;
  std::vector<Candidate> candidates;
  int32_t max_depth = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    const DraftStream& s = streams[i];
    const int32_t limit = std::min(s.limit, runtime::kMaxDraftDepth);
    double p = 1.0;
    for (int32_t j = 1; j <= limit; ++j) {
      p *= (*s.acceptance)[static_cast<size_t>(j - 1)];
      if (p < min_expected_ || p <= 0.0) break;
      // Rows it carried count a little more, new ones a little less; within a stream the
      // values still fall with j.
      double value = p;
      if (s.previous_depth >= 0) value *= j <= s.previous_depth ? 1.0 + kDepthStickiness : 1.0 - kDepthStickiness;
      candidates.push_back({value, static_cast<int32_t>(i), j});
      max_depth = std::max(max_depth, j);
    }
  }
  // Best survival first; among equals the shallower first, so every stream's rows stay in order.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.p != b.p ? a.p > b.p : a.depth < b.depth;
  });
  const auto num_streams = static_cast<int32_t>(streams.size());
  StepTime time(costs_.get(), num_streams, max_depth);
  double tokens = num_streams;
  double best_ms = time.ms();
  double best_rate = tokens / best_ms;
  size_t best_count = 0;
  const size_t num_allowed = std::min(candidates.size(), static_cast<size_t>(std::max(0, max_draft_rows)));
  for (size_t k = 0; k < num_allowed; ++k) {
    tokens += candidates[k].p;
    time.add(candidates[k].depth);
    const double ms = time.ms();
    // Strictly better only: a row that adds nothing measurable is not worth its memory traffic.
    if (ms > 0.0 && tokens / ms > best_rate * (1.0 + 1e-9)) {
      best_rate = tokens / ms;
      best_ms = ms;
      best_count = k + 1;
    }
  }
  for (size_t k = 0; k < best_count; ++k) ++depths[static_cast<size_t>(candidates[k].stream)];
  return has_costs() ? best_ms : 0.0;
}

double DraftPolicy::predict_ms(std::span<const int32_t> depths, int32_t prefill_sequences, int64_t prefill_rows) const {
  if (!has_costs()) return 0.0;
  const auto num_decoding = static_cast<int32_t>(depths.size());
  int32_t max_depth = 0;
  for (const int32_t d : depths) max_depth = std::max(max_depth, d);
  StepTime time(costs_.get(), num_decoding, max_depth);
  for (const int32_t d : depths) {
    for (int32_t j = 1; j <= d; ++j) time.add(j);
  }
  if (prefill_sequences == 0) return time.ms();
  // Prefill chunks: more streams and rows in the same forward (the table extrapolates).
  int64_t decode_rows = num_decoding;
  for (const int32_t d : depths) decode_rows += d;
  return costs_->trunk_ms(num_decoding + prefill_sequences, static_cast<double>(decode_rows + prefill_rows)) +
         (time.ms() - costs_->trunk_ms(num_decoding, static_cast<double>(decode_rows)));
}

AcceptanceEstimates::AcceptanceEstimates(double prior) : prior_(prior) {}

DraftAcceptance AcceptanceEstimates::seed(DraftKind kind) const {
  const DraftEvidence& k = by_kind_[static_cast<size_t>(kind)];
  DraftAcceptance a{};
  // The starting prior counts as one observation.
  for (size_t j = 0; j < a.size(); ++j) a[j] = (k.accepted[j] + prior_) / (k.reached[j] + 1.0);
  return a;
}

DraftAcceptance AcceptanceEstimates::estimate(DraftKind kind, const DraftEvidence& stream) const {
  DraftAcceptance a = seed(kind);
  for (size_t j = 0; j < a.size(); ++j) {
    a[j] = (stream.accepted[j] + kStreamPriorWeight * a[j]) / (stream.reached[j] + kStreamPriorWeight);
  }
  return a;
}

void AcceptanceEstimates::record(DraftKind kind, DraftEvidence& stream, int32_t num_drafted, int32_t num_accepted) {
  DraftEvidence& shared = by_kind_[static_cast<size_t>(kind)];
  for (size_t j = 0; j < stream.reached.size(); ++j) {
    stream.reached[j] *= kStreamDecay;
    stream.accepted[j] *= kStreamDecay;
  }
  // Draft j was reached when drafts 0..j-1 were accepted: only reached positions learn.
  for (int32_t j = 0; j < num_drafted && j <= num_accepted && j < runtime::kMaxDraftDepth; ++j) {
    const auto k = static_cast<size_t>(j);
    const double outcome = j < num_accepted ? 1.0 : 0.0;
    stream.reached[k] += 1.0;
    stream.accepted[k] += outcome;
    shared.reached[k] = kKindDecay * shared.reached[k] + 1.0;
    shared.accepted[k] = kKindDecay * shared.accepted[k] + outcome;
  }
}

}  // namespace deltaserve::scheduler
