// Speculative sampling preserves the target distribution: the emitted-token histogram of
// 50,000 accept/resample runs (one seed each) against p by chi-squared goodness of fit, with
// a draft distribution q deliberately different from p; broken procedures fail the same
// test. Also the chained two-draft case with top-k/top-p in both p and q, greedy exactness,
// logprobs of p and seeded determinism.
#include "runtime/draft_verifier.h"
#include "tests/runtime/chi_squared.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

namespace deltaserve::runtime {
namespace {

using testing::FitResult;
using testing::fit;
using testing::gamma_q;

constexpr int kNumRuns = 50000;
constexpr uint64_t kFirstSeed = 0x5EED0000;
constexpr double kMinPValue = 1e-3;
// Fixed logits over a vocabulary of 12; the draft head disagrees with the target on purpose.
const std::vector<float> kTargetLogits = {1.0f, 2.2f, 0.3f, -1.0f, 1.6f, 0.0f, -0.4f, 2.5f, 0.9f, -2.0f, 1.2f, 0.4f};
const std::vector<float> kDraftLogits = {2.4f, 0.5f, 0.8f, 1.9f, -0.5f, 1.1f, 0.2f, 1.0f, -1.0f, 1.5f, 0.0f, 2.0f};
const std::vector<float> kTarget2Logits = {0.2f, -1.0f, 1.8f, 0.7f, 2.1f, -0.3f, 1.4f, 0.0f, 2.6f, 0.5f, -0.8f, 1.1f};
const std::vector<float> kDraft2Logits = {1.7f, 0.9f, 0.4f, 2.2f, 1.0f, -0.6f, 2.5f, 0.3f, 0.8f, -1.2f, 1.9f, 0.1f};
// Chained drafts: closer to their targets (so both drafts often pass), yet each puts mass on
// a token the truncated target excludes (3, resp. 9) and under-drafts a likely one.
const std::vector<float> kChainDraftLogits = {1.0f, 1.0f, 0.3f, 2.3f, 1.6f, 0.0f, -0.4f, 2.5f, 0.9f, -2.0f, 1.2f, 0.4f};
const std::vector<float> kChainDraft2Logits = {0.2f, -1.0f, 1.8f, 0.7f, 2.1f, -0.3f, 1.4f, 0.0f, 1.8f, 2.4f, -0.8f, 1.1f};
const size_t kVocab = kTargetLogits.size();

std::vector<double> normalised(const TokenDistribution& d) {
  std::vector<double> p;
  for (size_t i = 0; i < d.mass.size(); ++i) p.push_back(d.probability(static_cast<int32_t>(i)));
  return p;
}

std::vector<double> distribution_of(const SamplingParams& params, const std::vector<float>& logits) {
  const Sampler s(params, 0);
  return normalised(s.distribution(s.processed_logits(logits)));
}

// One draft against one target row: how the row's emitted token is decided.
using Decide = std::function<int32_t(const TokenDistribution& p, const TokenDistribution& q, int32_t draft,
                                     uint64_t seed, uint64_t position)>;

int32_t decide_correctly(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, uint64_t seed,
                         uint64_t position) {
  return decide_draft(p, q, draft, seed, position).id;
}

// Broken: accepts any draft q could have produced (the output is then q, not p).
int32_t decide_accepting_all(const TokenDistribution&, const TokenDistribution& q, int32_t draft, uint64_t, uint64_t) {
  return q.mass[static_cast<size_t>(draft)] > 0 ? draft : -1;
}

// Broken: the right acceptance test, but a rejection resamples from p instead of the residual.
int32_t decide_resampling_p(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, uint64_t seed,
                            uint64_t position) {
  const DraftDecision d = decide_draft(p, q, draft, seed, position);
  return d.accepted ? d.id : draw_token(p, sampler_word(seed, position, DrawStream::Token));
}

// kNumRuns single-draft rows, one seed each: the histogram of the emitted token.
std::vector<int64_t> single_draft_histogram(const SamplingParams& params, const Decide& decide,
                                            double* acceptance = nullptr) {
  std::vector<int64_t> counts(kVocab, 0);
  int64_t num_accepted = 0;
  for (int k = 0; k < kNumRuns; ++k) {
    const Sampler sampler(params, kFirstSeed + static_cast<uint64_t>(k));
    TokenDistribution q;
    const int32_t draft = draw_draft(sampler, kDraftLogits, 0, q);
    const TokenDistribution p = sampler.distribution(sampler.processed_logits(kTargetLogits));
    const int32_t id = decide(p, q, draft, sampler.seed(), 0);
    if (id < 0) {
      ADD_FAILURE() << "no token emitted";
      break;
    }
    ++counts[static_cast<size_t>(id)];
    num_accepted += id == draft;
  }
  if (acceptance != nullptr) *acceptance = static_cast<double>(num_accepted) / kNumRuns;
  return counts;
}

void print_fit(const char* what, const FitResult& r) {
  std::printf("%s: chi2 %.2f, dof %d, p-value %.4g\n", what, r.chi2, r.dof, r.p_value);
}

TEST(DraftVerifier, ChiSquaredPValuesMatchTables) {
  EXPECT_NEAR(gamma_q(0.5, 10.83 / 2), 0.001, 2e-5);  // 1 dof at alpha 0.001
  EXPECT_NEAR(gamma_q(3.5, 24.32 / 2), 0.001, 2e-5);  // 7 dof
  EXPECT_NEAR(gamma_q(17.5, 49.80 / 2), 0.05, 2e-4);  // 35 dof at alpha 0.05
  EXPECT_NEAR(gamma_q(1.0, 2.0), std::exp(-2.0), 1e-12);
}

TEST(DraftVerifier, OneDraftEmitsTheTargetDistribution) {
  SamplingParams params;
  params.temperature = 0.9f;
  // Independent of the sampler's code: softmax(l / T) of the target logits.
  std::vector<double> expected(kVocab);
  double total = 0;
  for (size_t i = 0; i < kVocab; ++i) total += expected[i] = std::exp(kTargetLogits[i] / 0.9);
  for (double& e : expected) e /= total;
  double acceptance = 0;
  const FitResult r = fit(single_draft_histogram(params, decide_correctly, &acceptance), expected);
  print_fit("one draft, full vocabulary", r);
  std::printf("  acceptance %.3f\n", acceptance);
  EXPECT_GT(r.p_value, kMinPValue) << "chi2 " << r.chi2 << " with " << r.dof << " dof";
  EXPECT_EQ(r.dof, static_cast<int>(kVocab) - 1);
  // q differs enough from p that the rejection path carries real weight.
  EXPECT_LT(acceptance, 0.8);
  EXPECT_GT(acceptance, 0.2);
}

TEST(DraftVerifier, BrokenProceduresFailTheSameTest) {
  SamplingParams params;
  params.temperature = 0.9f;
  const std::vector<double> p = distribution_of(params, kTargetLogits);
  const FitResult accept_all = fit(single_draft_histogram(params, decide_accepting_all), p);
  const FitResult resample_p = fit(single_draft_histogram(params, decide_resampling_p), p);
  print_fit("broken: accept whenever q(x) > 0", accept_all);
  print_fit("broken: resample from p, not the residual", resample_p);
  EXPECT_GT(accept_all.chi2, 1000.0);
  EXPECT_LT(accept_all.p_value, 1e-12);
  EXPECT_GT(resample_p.chi2, 1000.0);
  EXPECT_LT(resample_p.p_value, 1e-12);
}

SamplingParams truncated_params() {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 6;
  params.top_p = 0.9f;
  return params;
}

TEST(DraftVerifier, TruncatedDraftMassOutsideTheTargetIsNeverEmitted) {
  const SamplingParams params = truncated_params();
  const std::vector<double> p = distribution_of(params, kTargetLogits);
  const std::vector<double> q = distribution_of(params, kDraftLogits);
  double q_outside = 0;
  for (size_t i = 0; i < kVocab; ++i) q_outside += p[i] == 0.0 ? q[i] : 0.0;
  ASSERT_GT(q_outside, 0.2) << "the test needs q to put mass where p has none";
  const FitResult r = fit(single_draft_histogram(params, decide_correctly), p);
  print_fit("one draft, top-k 6 + top-p 0.9 in p and q", r);
  EXPECT_EQ(r.num_impossible, 0);
  EXPECT_GT(r.p_value, kMinPValue) << "chi2 " << r.chi2 << " with " << r.dof << " dof";
  const FitResult broken = fit(single_draft_histogram(params, decide_resampling_p), p);
  EXPECT_GT(broken.chi2, 1000.0);
}

// Two chained drafts per step with the production loop (verify_drafts); a rejection at the
// first row leaves the second token to the next step, which drafts it again. The pair of
// the first two emitted tokens must follow p1 x p2 (no penalties: p2 does not depend on t1).
TEST(DraftVerifier, TwoChainedDraftsEmitTheProductDistribution) {
  const SamplingParams params = truncated_params();
  const std::vector<double> p1 = distribution_of(params, kTargetLogits);
  const std::vector<double> p2 = distribution_of(params, kTarget2Logits);
  const std::vector<double> q1 = distribution_of(params, kChainDraftLogits);
  const std::vector<double> q2 = distribution_of(params, kChainDraft2Logits);
  ASSERT_EQ(p1[3], 0.0);
  ASSERT_GT(q1[3], 0.1);
  ASSERT_EQ(p2[9], 0.0);
  ASSERT_GT(q2[9], 0.1);
  std::vector<float> rows = kTargetLogits;  // target rows 0, 1 and the bonus row 2
  rows.insert(rows.end(), kTarget2Logits.begin(), kTarget2Logits.end());
  rows.insert(rows.end(), kDraftLogits.begin(), kDraftLogits.end());
  const std::span<const float> all_rows(rows);
  std::vector<int64_t> counts(kVocab * kVocab, 0);
  int64_t num_one = 0, num_two = 0, num_three = 0;
  for (int k = 0; k < kNumRuns; ++k) {
    Sampler target(params, kFirstSeed + static_cast<uint64_t>(k));
    Sampler drafter = target;
    std::vector<TokenDistribution> q(2);
    const int32_t x1 = draw_draft(drafter, kChainDraftLogits, 0, q[0]);
    drafter.accept(x1);
    const int32_t x2 = draw_draft(drafter, kChainDraft2Logits, 1, q[1]);
    const std::vector<int32_t> drafts = {x1, x2};
    std::vector<SampledToken> out = verify_drafts(target, all_rows, static_cast<int64_t>(kVocab), drafts, q);
    num_one += out.size() == 1;
    num_two += out.size() == 2;
    num_three += out.size() == 3;
    if (out.size() == 1) {  // the next step: one fresh draft for position 1
      Sampler next_drafter = target;
      std::vector<TokenDistribution> next_q(1);
      const std::vector<int32_t> next = {draw_draft(next_drafter, kChainDraft2Logits, 1, next_q[0])};
      const std::vector<SampledToken> more =
          verify_drafts(target, all_rows.subspan(kVocab), static_cast<int64_t>(kVocab), next, next_q);
      out.push_back(more[0]);
    }
    ++counts[static_cast<size_t>(out[0].id) * kVocab + static_cast<size_t>(out[1].id)];
  }
  std::vector<double> expected(kVocab * kVocab);
  for (size_t a = 0; a < kVocab; ++a)
    for (size_t b = 0; b < kVocab; ++b) expected[a * kVocab + b] = p1[a] * p2[b];
  const FitResult r = fit(counts, expected);
  print_fit("two chained drafts, pairs vs p1 x p2", r);
  std::printf("  emitted per step: 1 x%lld, 2 x%lld, 3 x%lld\n", static_cast<long long>(num_one),
              static_cast<long long>(num_two), static_cast<long long>(num_three));
  EXPECT_EQ(r.num_impossible, 0);
  EXPECT_GT(r.p_value, kMinPValue) << "chi2 " << r.chi2 << " with " << r.dof << " dof";
  EXPECT_GE(r.dof, 8);
  // Every path of the loop ran: rejection at row 0, at row 1, and both drafts accepted.
  EXPECT_GT(num_one, 1000);
  EXPECT_GT(num_two, 1000);
  EXPECT_GT(num_three, 1000);
}

TEST(DraftVerifier, DraftEqualToTheTargetIsAlwaysAccepted) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 5;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Sampler target(params, seed);
    TokenDistribution q;
    const std::vector<int32_t> drafts = {draw_draft(target, kTargetLogits, 0, q)};
    std::vector<float> rows = kTargetLogits;
    rows.insert(rows.end(), kTargetLogits.begin(), kTargetLogits.end());
    const std::vector<SampledToken> out =
        verify_drafts(target, rows, static_cast<int64_t>(kVocab), drafts, std::span<const TokenDistribution>(&q, 1));
    ASSERT_EQ(out.size(), 2u) << "seed " << seed;
    EXPECT_EQ(out[0].id, drafts[0]);
    EXPECT_EQ(target.num_output_tokens(), 2);
  }
}

TEST(DraftVerifier, GreedyAcceptsWhileEqualToTheArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<float> rows = kTargetLogits;  // argmax 7
  rows.insert(rows.end(), kTarget2Logits.begin(), kTarget2Logits.end());  // argmax 8
  rows.insert(rows.end(), kDraftLogits.begin(), kDraftLogits.end());      // argmax 0
  Sampler all(params, 1);
  std::vector<SampledToken> out = verify_drafts(all, rows, static_cast<int64_t>(kVocab), std::vector<int32_t>{7, 8}, {});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].id, 0);
  Sampler second_wrong(params, 1);
  out = verify_drafts(second_wrong, rows, static_cast<int64_t>(kVocab), std::vector<int32_t>{7, 3}, {});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].id, 8);  // the target's token replaces the rejected draft
  EXPECT_EQ(second_wrong.num_output_tokens(), 2);
}

TEST(DraftVerifier, LogprobsAreThoseOfTheTarget) {
  SamplingParams params = truncated_params();
  params.logprobs = true;
  params.top_logprobs = 3;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Sampler target(params, seed);
    const Sampler reference = target;  // same state as row 0
    TokenDistribution q;
    const std::vector<int32_t> drafts = {draw_draft(target, kDraftLogits, 0, q)};
    std::vector<float> rows = kTargetLogits;
    rows.insert(rows.end(), kTarget2Logits.begin(), kTarget2Logits.end());
    const std::vector<SampledToken> out =
        verify_drafts(target, rows, static_cast<int64_t>(kVocab), drafts, std::span<const TokenDistribution>(&q, 1));
    const SampledToken want = reference.describe(reference.processed_logits(kTargetLogits), out[0].id);
    EXPECT_EQ(out[0].logprob, want.logprob);
    ASSERT_EQ(out[0].top_logprobs.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(out[0].top_logprobs[k].id, want.top_logprobs[k].id);
  }
}

TEST(DraftVerifier, SameSeedSameTokensAndStreamsAreIndependent) {
  const SamplingParams params = truncated_params();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    TokenDistribution q1, q2;
    EXPECT_EQ(draw_draft(Sampler(params, seed), kDraftLogits, 3, q1), draw_draft(Sampler(params, seed), kDraftLogits, 3, q2));
    EXPECT_NE(sampler_uniform(seed, 3, DrawStream::Draft), sampler_uniform(seed, 3, DrawStream::Token));
    EXPECT_NE(sampler_uniform(seed, 3, DrawStream::Accept), sampler_uniform(seed, 3, DrawStream::Token));
  }
  // Stream Token is the plain sampler's draw: plain decode is unchanged by the streams.
  EXPECT_EQ(sampler_uniform(42, 7), philox4x32(42, 7)[0] * (1.0 / 4294967296.0));
}

TEST(DraftVerifier, MalformedInputsThrow) {
  Sampler s(truncated_params(), 1);
  TokenDistribution q;
  const std::vector<int32_t> drafts = {draw_draft(s, kDraftLogits, 0, q)};
  EXPECT_THROW(verify_drafts(s, kTargetLogits, static_cast<int64_t>(kVocab), drafts, std::span<const TokenDistribution>(&q, 1)),
               std::invalid_argument);  // one row for two
  TokenDistribution small;
  small.mass = {1};
  small.total = 1;
  EXPECT_THROW(decide_draft(small, q, 0, 1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace deltaserve::runtime
