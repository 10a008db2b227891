// The speculation policy (scheduler/draft_policy.h): given step costs and acceptances it picks
// the depths with the most expected tokens per second; flat costs draft deep, steeply rising
// costs turn drafting off, MTP chain passes are paid for, limits and the row budget bound it;
// the acceptance estimates learn per stream and per request kind; and in the scheduler the
// depths come from it, with no fixed cap on a step's draft rows.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/grammar/constraint_grammars.h"
#include "runtime/grammar/constraint.h"
#include "scheduler/draft_policy.h"
#include "tests/scheduler/harness.h"

namespace deltaserve::scheduler {
namespace {

using runtime::StepCostTable;

std::shared_ptr<const StepCostTable> table(std::vector<int32_t> streams, std::vector<int32_t> rows,
                                           std::vector<std::vector<double>> ms, std::vector<int32_t> mtp_rows = {},
                                           std::vector<double> mtp_ms = {}) {
  return std::make_shared<const StepCostTable>(runtime::StepCostKey{"test", "test"}, std::move(streams), std::move(rows),
                                               std::move(ms), std::move(mtp_rows), std::move(mtp_ms));
}

DraftAcceptance rates(std::initializer_list<double> values) {
  DraftAcceptance a{};
  size_t j = 0;
  for (const double v : values) a[j++] = v;
  return a;
}

std::vector<int32_t> choose(const DraftPolicy& policy, const std::vector<DraftStream>& streams, int32_t max_rows = 1 << 20,
                            double* ms = nullptr) {
  std::vector<int32_t> depths;
  const double predicted = policy.choose(streams, max_rows, depths);
  if (ms != nullptr) *ms = predicted;
  return depths;
}

TEST(DraftPolicyTest, PicksTheDepthWithTheMostTokensPerSecond) {
  // One stream: 1..4 rows cost 10, 11, 12, 20 ms. Expected tokens 1, 1.9, 2.62, 3.124:
  // 0.100, 0.173, 0.218, 0.156 tokens/ms, so depth 2.
  const DraftPolicy policy(table({1}, {1, 2, 3, 4}, {{10, 11, 12, 20}}), 0.0);
  const DraftAcceptance a = rates({0.9, 0.8, 0.7});
  double ms = 0;
  EXPECT_EQ(choose(policy, {{3, &a}}, 1 << 20, &ms), (std::vector<int32_t>{2}));
  EXPECT_DOUBLE_EQ(ms, 12.0);
  const std::vector<int32_t> depths = {2};
  EXPECT_DOUBLE_EQ(policy.predict_ms(depths, 0, 0), 12.0);
  // Even drafts that always survive do not pay for the jump at 4 rows: 4 / 20 < 3 / 12.
  const DraftAcceptance sure = rates({1.0, 1.0, 1.0});
  EXPECT_EQ(choose(policy, {{3, &sure}}), (std::vector<int32_t>{2}));
  // With the jump gone they go to the limit.
  const DraftPolicy smooth(table({1}, {1, 2, 3, 4}, {{10, 11, 12, 13}}), 0.0);
  EXPECT_EQ(choose(smooth, {{3, &sure}}), (std::vector<int32_t>{3}));
}

TEST(DraftPolicyTest, FlatCostsDraftToTheLimit) {
  const DraftPolicy policy(table({1, 4}, {1, 2, 3, 4}, {{10, 10, 10, 10}, {10, 10, 10, 10}}), 0.0);
  const DraftAcceptance a = rates({0.5, 0.5, 0.5});
  const std::vector<DraftStream> streams(4, DraftStream{3, &a});
  EXPECT_EQ(choose(policy, streams), (std::vector<int32_t>{3, 3, 3, 3}));
}

TEST(DraftPolicyTest, SteeplyRisingCostsTurnDraftingOff) {
  // Every row costs as much as the decode row: a draft would need acceptance 1 to pay.
  const DraftPolicy policy(table({1, 4}, {1, 2, 3, 4}, {{10, 20, 30, 40}, {40, 80, 120, 160}}), 0.0);
  const DraftAcceptance a = rates({0.9, 0.9, 0.9});
  EXPECT_EQ(choose(policy, {{3, &a}}), (std::vector<int32_t>{0}));
  const std::vector<DraftStream> streams(4, DraftStream{3, &a});
  EXPECT_EQ(choose(policy, streams), (std::vector<int32_t>{0, 0, 0, 0}));
  // Costs that rise only with load: one stream drafts, 16 do not (4 -> 16 streams extrapolated).
  const DraftPolicy load(table({1, 4}, {1, 2, 3, 4}, {{10, 10.5, 11, 11.5}, {12, 24, 36, 48}}), 0.0);
  EXPECT_EQ(choose(load, {{3, &a}}), (std::vector<int32_t>{3}));
  EXPECT_EQ(choose(load, std::vector<DraftStream>(16, DraftStream{3, &a})), std::vector<int32_t>(16, 0));
}

TEST(DraftPolicyTest, RowsGoToTheStreamsThatAcceptThem) {
  // Two streams; every row past the decode rows costs 2 ms. A: 0.9, 0.9; B: 0.3, 0.3.
  // 2/10 -> +A1 2.9/12 -> +A2 3.71/14 (best) -> +B1 4.01/16 -> +B2 4.1/18.
  const DraftPolicy policy(table({1, 2}, {1, 2, 3}, {{5, 7, 9}, {10, 14, 18}}), 0.0);
  const DraftAcceptance good = rates({0.9, 0.9}), poor = rates({0.3, 0.3});
  EXPECT_EQ(choose(policy, {{2, &good}, {2, &poor}}), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(choose(policy, {{2, &poor}, {2, &good}}), (std::vector<int32_t>{0, 2}));
}

TEST(DraftPolicyTest, ChainPassesArePaidFor) {
  // Flat trunk; one MTP pass costs 5 ms. Draft 1 brings the catch-up pass (1.9 / 15 beats
  // 1 / 10); draft 2 needs a chain pass: 1.9 / 15 beats 2.35 / 20.
  const DraftAcceptance a = rates({0.9, 0.5});
  const DraftPolicy with_mtp(table({1}, {1, 2, 3}, {{10, 10, 10}}, {1}, {5.0}), 0.0);
  EXPECT_EQ(choose(with_mtp, {{2, &a}}), (std::vector<int32_t>{1}));
  const DraftPolicy trunk_only(table({1}, {1, 2, 3}, {{10, 10, 10}}), 0.0);
  EXPECT_EQ(choose(trunk_only, {{2, &a}}), (std::vector<int32_t>{2}));
}

// A stream at depth 0 leaves its rows waiting for a later catch-up (runtime/mtp_drafter.h):
// drafting nothing costs no MTP pass, so an expensive head turns drafting off entirely.
TEST(DraftPolicyTest, DepthZeroCostsNoMtpPass) {
  const DraftAcceptance a = rates({0.5});
  const DraftPolicy policy(table({1, 4}, {1, 2}, {{10, 10}, {10, 10}}, {1, 4}, {8.0, 8.0}), 0.0);
  double ms = -1;
  // 1 / 10 beats 1.5 / 18 for one stream; four: 4 / 10 beats 6 / 18.
  EXPECT_EQ(choose(policy, {{1, &a}}, 1 << 20, &ms), (std::vector<int32_t>{0}));
  EXPECT_DOUBLE_EQ(ms, 10.0);
  EXPECT_EQ(choose(policy, std::vector<DraftStream>(4, DraftStream{1, &a})), std::vector<int32_t>(4, 0));
  const std::vector<int32_t> none(4, 0);
  EXPECT_DOUBLE_EQ(policy.predict_ms(none, 0, 0), 10.0);
}

// Near a tie the depth the stream had wins; a clear gain still moves it. One stream, rows cost
// 10, 11, 12.4 ms, a1 = 0.9: depth 1 gives 1.9 / 11 = 0.1727 tokens per ms. With a2 = 0.2778
// depth 2 gives 2.15 / 12.4 = 0.1734 (0.4% better): a stream stays at the depth it had. With
// a2 = 0.5, 2.35 / 12.4 = 0.1895 (10% better) moves it from 1 to 2; with a2 = 0.2,
// 2.08 / 12.4 = 0.1677 (3% worse, its row 26% short of paying) moves it from 2 to 1.
TEST(DraftPolicyTest, StickinessKeepsTheDepthThroughANearTie) {
  const DraftPolicy policy(table({1}, {1, 2, 3}, {{10, 11, 12.4}}), 0.0);
  const DraftAcceptance near = rates({0.9, 0.2778}), better = rates({0.9, 0.5}), worse = rates({0.9, 0.2});
  EXPECT_EQ(choose(policy, {{2, &near, -1}}), (std::vector<int32_t>{2}));  // no history: the best
  EXPECT_EQ(choose(policy, {{2, &near, 2}}), (std::vector<int32_t>{2}));
  EXPECT_EQ(choose(policy, {{2, &near, 1}}), (std::vector<int32_t>{1}));
  EXPECT_EQ(choose(policy, {{2, &better, 1}}), (std::vector<int32_t>{2}));
  EXPECT_EQ(choose(policy, {{2, &worse, 2}}), (std::vector<int32_t>{1}));
}

TEST(DraftPolicyTest, BoundedByLimitsAndTheRowBudget) {
  const DraftPolicy flat(table({1, 8}, {1, 2, 3, 4}, {{1, 1, 1, 1}, {1, 1, 1, 1}}), 0.0);
  const DraftAcceptance a = rates({0.9, 0.9, 0.9});
  // Per-stream limits (the request's draft_depth, --draft-depth, max_tokens): never exceeded.
  EXPECT_EQ(choose(flat, {{1, &a}, {0, &a}, {3, &a}, {2, &a}}), (std::vector<int32_t>{1, 0, 3, 2}));
  // The step's row budget: 5 draft rows at most, the likeliest first.
  const std::vector<int32_t> depths = choose(flat, std::vector<DraftStream>(4, DraftStream{3, &a}), 5);
  int32_t total = 0;
  for (const int32_t d : depths) {
    total += d;
    EXPECT_GE(d, 1);
  }
  EXPECT_EQ(total, 5);
  EXPECT_EQ(choose(flat, std::vector<DraftStream>(4, DraftStream{3, &a}), 0), std::vector<int32_t>(4, 0));
}

TEST(DraftPolicyTest, WithoutCostsEveryStreamDraftsToItsLimitAboveTheFloor) {
  const DraftAcceptance a = rates({0.5, 0.5, 0.5});
  double ms = -1;
  EXPECT_EQ(choose(DraftPolicy(nullptr, 0.0), {{3, &a}, {1, &a}}, 1 << 20, &ms), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(ms, 0.0);  // nothing to predict from
  // min_expected 0.3: the second draft survives 0.25 of the time, below it.
  EXPECT_EQ(choose(DraftPolicy(nullptr, 0.3), {{3, &a}}), (std::vector<int32_t>{1}));
  const DraftAcceptance never = rates({0.0, 1.0});
  EXPECT_EQ(choose(DraftPolicy(nullptr, 0.0), {{2, &never}}), (std::vector<int32_t>{0}));
}

TEST(AcceptanceEstimatesTest, StreamsAndKindsLearnFromReachedPositionsOnly) {
  AcceptanceEstimates estimates(0.8);
  EXPECT_DOUBLE_EQ(estimates.seed(DraftKind::kGreedy)[0], 0.8);
  DraftEvidence stream;
  EXPECT_DOUBLE_EQ(estimates.estimate(DraftKind::kGreedy, stream)[0], 0.8);  // no evidence: the kind's
  // 3 drafted, 1 accepted: position 0 accepted, position 1 rejected, position 2 never reached.
  estimates.record(DraftKind::kGreedy, stream, 3, 1);
  EXPECT_DOUBLE_EQ(stream.reached[0], 1.0);
  EXPECT_DOUBLE_EQ(stream.accepted[0], 1.0);
  EXPECT_DOUBLE_EQ(stream.reached[1], 1.0);
  EXPECT_DOUBLE_EQ(stream.accepted[1], 0.0);
  EXPECT_DOUBLE_EQ(stream.reached[2], 0.0);
  // The kind: the prior worth one observation, then the observation.
  const DraftAcceptance kind = estimates.seed(DraftKind::kGreedy);
  EXPECT_DOUBLE_EQ(kind[0], (1.0 + 0.8) / 2.0);
  EXPECT_DOUBLE_EQ(kind[1], 0.8 / 2.0);
  EXPECT_DOUBLE_EQ(kind[2], 0.8);
  EXPECT_DOUBLE_EQ(estimates.seed(DraftKind::kSampled)[1], 0.8);  // other kinds untouched
  // The stream: its one observation against the kind's estimate worth kStreamPriorWeight.
  const double w = AcceptanceEstimates::kStreamPriorWeight;
  const DraftAcceptance own = estimates.estimate(DraftKind::kGreedy, stream);
  EXPECT_DOUBLE_EQ(own[0], (1.0 + w * kind[0]) / (1.0 + w));
  EXPECT_DOUBLE_EQ(own[1], (0.0 + w * kind[1]) / (1.0 + w));
  EXPECT_DOUBLE_EQ(own[2], kind[2]);
  // The next step ages the evidence, drafted or not.
  estimates.record(DraftKind::kGreedy, stream, 0, 0);
  EXPECT_DOUBLE_EQ(stream.reached[0], AcceptanceEstimates::kStreamDecay);
  // A kind that keeps rejecting seeds its new streams low.
  DraftEvidence other;
  for (int i = 0; i < 200; ++i) estimates.record(DraftKind::kSampled, other, 1, 0);
  EXPECT_LT(estimates.seed(DraftKind::kSampled)[0], 0.05);
  EXPECT_GT(estimates.seed(DraftKind::kGreedy)[0], 0.8);
}

// An unlucky run at a deep position must not keep a stream shallow for good: once the policy
// stops drafting the position, the stream's evidence fades and its estimate returns to its
// kind's (the old running average, learning only when reached, froze at the low reading).
TEST(AcceptanceEstimatesTest, AnUnreachedPositionReturnsToTheKindsEstimate) {
  AcceptanceEstimates estimates(1.0);
  DraftEvidence others, stream;
  // The kind has seen position 1 accepted 60% of the time.
  for (int i = 0; i < 400; ++i) estimates.record(DraftKind::kGreedy, others, 2, i % 5 < 3 ? 2 : 1);
  // This stream was rejected at position 1 six times running.
  for (int i = 0; i < 6; ++i) estimates.record(DraftKind::kGreedy, stream, 2, 1);
  EXPECT_LT(estimates.estimate(DraftKind::kGreedy, stream)[1], 0.4);
  // Then drafts one only (position 1 never reached) for 150 steps.
  for (int i = 0; i < 150; ++i) estimates.record(DraftKind::kGreedy, stream, 1, 1);
  EXPECT_NEAR(estimates.estimate(DraftKind::kGreedy, stream)[1], 0.6, 0.05);
}

// A stream whose text changes (acceptance 0.9 -> 0.2) is followed within a few dozen steps.
TEST(AcceptanceEstimatesTest, AStreamFollowsAChangeInItsAcceptance) {
  AcceptanceEstimates estimates(1.0);
  DraftEvidence stream;
  for (int i = 0; i < 300; ++i) estimates.record(DraftKind::kGreedy, stream, 1, i % 10 == 0 ? 0 : 1);
  EXPECT_NEAR(estimates.estimate(DraftKind::kGreedy, stream)[0], 0.9, 0.03);
  for (int i = 0; i < 60; ++i) estimates.record(DraftKind::kGreedy, stream, 1, i % 5 == 0 ? 1 : 0);
  EXPECT_LT(estimates.estimate(DraftKind::kGreedy, stream)[0], 0.5);
}

TEST(AcceptanceEstimatesTest, KindsFollowTheSampling) {
  runtime::SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(draft_kind(p), DraftKind::kGreedy);
  p.temperature = 0.7f;
  EXPECT_EQ(draft_kind(p), DraftKind::kSampled);
  p.constraint = std::make_shared<runtime::grammar::Constraint>(
      runtime::grammar::json_schema_grammar(runtime::grammar::SchemaJson::parse(R"({"type":"integer"})")),
      std::make_shared<runtime::grammar::Vocabulary>(std::vector<std::string>{"1", "2", "x"}), std::vector<int32_t>{2});
  EXPECT_EQ(draft_kind(p), DraftKind::kConstrained);
  EXPECT_STREQ(draft_kind_name(DraftKind::kConstrained), "constrained");
}

// In the scheduler: 16 decoding streams with flat costs all draft to --draft-depth (64 rows in
// a step, past the old fixed cap of 4); with rows costing as much as decode rows none draft;
// a request's draft_depth bounds its own stream.
class SchedulerDraftTest : public ::testing::Test {
 protected:
  static testing::Harness make(std::shared_ptr<const StepCostTable> costs) {
    runtime::RunnerLimits limits = testing::make_limits(16, 16, 256);
    limits.max_draft_depth = 3;
    SchedulerConfig config;
    config.draft_min_expected = 0.0;
    config.step_costs = std::move(costs);
    return testing::Harness(limits, config);
  }
  // Decode depths of the last step once all 16 streams decode.
  static std::vector<int32_t> decode_depths(testing::Harness& h, int32_t request_depth_of_first = -1) {
    for (int i = 0; i < 16; ++i) {
      RequestSpec spec = testing::make_spec(8, 64, 100 + static_cast<uint32_t>(i));
      if (i == 0) spec.draft_depth = request_depth_of_first;
      h.add(std::move(spec));
    }
    std::vector<int32_t> depths;
    h.runner.on_execute = [&](const runtime::StepPlan& plan) {
      depths.clear();
      for (const runtime::SequencePlan& p : plan.sequences) {
        if (p.is_decode) depths.push_back(p.draft_depth);
      }
    };
    for (int i = 0; i < 4; ++i) h.step();
    return depths;
  }
};

TEST_F(SchedulerDraftTest, FlatCostsDraftEveryStreamWithoutARowCap) {
  auto flat = table({1, 16}, {1, 2, 3, 4}, {{5, 5, 5, 5}, {5, 5, 5, 5}});
  testing::Harness h = make(flat);
  const std::vector<int32_t> depths = decode_depths(h, 1);
  ASSERT_EQ(depths.size(), 16u);
  EXPECT_EQ(depths[0], 1);  // the request's own draft_depth
  for (size_t i = 1; i < depths.size(); ++i) EXPECT_EQ(depths[i], 3) << i;
  EXPECT_EQ(h.last_report.num_rows, 16 + 1 + 15 * 3);
  EXPECT_EQ(h.last_report.draft_depths[1], 1);
  EXPECT_EQ(h.last_report.draft_depths[3], 15);
  EXPECT_DOUBLE_EQ(h.last_report.predicted_step_ms, 5.0);
}

TEST_F(SchedulerDraftTest, CostlyRowsTurnDraftingOff) {
  // 16 streams: every draft row costs 7.5 ms, a decode row 5 ms (new streams' acceptance is 1).
  testing::Harness h = make(table({1, 16}, {1, 2, 3, 4}, {{5, 10, 15, 20}, {80, 200, 320, 440}}));
  const std::vector<int32_t> depths = decode_depths(h);
  EXPECT_EQ(depths, std::vector<int32_t>(16, 0));
  EXPECT_EQ(h.last_report.draft_depths[0], 16);
  EXPECT_DOUBLE_EQ(h.last_report.predicted_step_ms, 80.0);
}

}  // namespace
}  // namespace deltaserve::scheduler
