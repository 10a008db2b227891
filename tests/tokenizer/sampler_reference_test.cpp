// The sampler's distribution and logprobs against a plain reference that applies each rule
// of runtime/sampler.h literally over the whole vocabulary (exp of every token, a full sort
// for top-k and top-p, a full sort for the top logprobs): the fast paths (top-k before any
// exp, top-p sorting only the tokens that can be in its set, a heap for top logprobs) must
// give the same weights, total and ids bit for bit, on large random rows with -inf tokens,
// ties and every combination of the filters.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "runtime/sampler.h"
#include "runtime/thread_pool.h"

namespace deltaserve::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool more_likely(const std::vector<float>& v, int32_t a, int32_t b) { return v[a] != v[b] ? v[a] > v[b] : a < b; }

int32_t argmax_of(const std::vector<float>& v) {
  std::vector<int32_t> ids(v.size());
  std::iota(ids.begin(), ids.end(), 0);
  return *std::min_element(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return more_likely(v, a, b); });
}

// runtime/sampler.h's rules, literally.
TokenDistribution reference_distribution(const SamplingParams& params, const std::vector<float>& l) {
  TokenDistribution dist;
  dist.weights.assign(l.size(), 0.0);
  const int32_t top = argmax_of(l);
  const double inv_t = 1.0 / params.temperature;
  const double max_logit = l[top] * inv_t;
  const double floor = params.min_p > 0.0f ? params.min_p : 0.0;
  std::vector<double> w(l.size(), 0.0);
  std::vector<int32_t> kept;
  for (int32_t i = 0; i < static_cast<int32_t>(l.size()); ++i) {
    if (l[i] == kNegInf) continue;
    const double x = std::exp(l[i] * inv_t - max_logit);
    if (x <= 0.0 || x < floor) continue;
    w[i] = x;
    kept.push_back(i);
  }
  auto by_likelihood = [&](int32_t a, int32_t b) { return more_likely(l, a, b); };
  std::sort(kept.begin(), kept.end(), by_likelihood);
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size()) kept.resize(params.top_k);
  if (params.top_p < 1.0f) {
    std::vector<int32_t> by_id = kept;
    std::sort(by_id.begin(), by_id.end());
    double total = 0;
    for (int32_t i : by_id) total += w[i];
    double mass = 0;
    size_t n = 0;
    while (n < kept.size() && mass < params.top_p * total) mass += w[kept[n++]];
    kept.resize(std::max<size_t>(n, 1));
  }
  std::sort(kept.begin(), kept.end());
  for (int32_t i : kept) {
    dist.weights[i] = w[i];
    dist.total += w[i];
  }
  return dist;
}

// Language-model-like rows: a long normal tail, a few peaks, some -inf (a constraint's mask)
// and runs of equal logits (ties broken by id).
std::vector<float> random_row(std::mt19937_64& rng, int32_t vocab) {
  std::normal_distribution<float> tail(0.0f, 2.5f);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& x : row) x = tail(rng);
  for (int i = 0; i < 6; ++i) row[pick(rng)] = 8.0f + static_cast<float>(i);
  for (int i = 0; i < vocab / 50; ++i) row[pick(rng)] = kNegInf;
  const float tie = row[pick(rng)];
  for (int i = 0; i < 40; ++i) row[pick(rng)] = tie;
  return row;
}

TEST(SamplerReference, DistributionEqualsTheLiteralRulesBitForBit) {
  std::mt19937_64 rng(20261207);
  const float temperatures[] = {0.3f, 0.7f, 1.0f, 2.5f};
  const int32_t top_ks[] = {0, 1, 20, 300, 3000};  // heap and selection paths (vocab 4,096)
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.01f};
  const float min_ps[] = {0.0f, 0.05f};
  int checked = 0;
  for (float t : temperatures) {
    for (int32_t k : top_ks) {
      for (float p : top_ps) {
        for (float m : min_ps) {
          SamplingParams params;
          params.temperature = t;
          params.top_k = k;
          params.top_p = p;
          params.min_p = m;
          const Sampler sampler(params, 1);
          const std::vector<float> row = random_row(rng, 4096);
          const TokenDistribution want = reference_distribution(params, row);
          const TokenDistribution got = sampler.distribution(sampler.processed_logits(row));
          ASSERT_EQ(got.total, want.total) << "T " << t << " top_k " << k << " top_p " << p << " min_p " << m;
          ASSERT_EQ(got.weights, want.weights) << "T " << t << " top_k " << k << " top_p " << p << " min_p " << m;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 160);
}

TEST(SamplerReference, APoolSplitsTheRowWithoutChangingABit) {
  std::mt19937_64 rng(77);
  const ThreadPool pool(4);
  for (float top_p : {1.0f, 0.9f}) {
    SamplingParams params;
    params.temperature = 0.8f;
    params.top_p = top_p;
    params.min_p = top_p < 1.0f ? 0.01f : 0.0f;
    Sampler serial(params, 3), pooled(params, 3);
    pooled.set_parallel(&pool);
    const std::vector<float> row = random_row(rng, 100000);  // above the pool's threshold
    const TokenDistribution a = serial.distribution(serial.processed_logits(row));
    const TokenDistribution b = pooled.distribution(pooled.processed_logits(row));
    EXPECT_EQ(a.weights, b.weights);
    EXPECT_EQ(a.total, b.total);
    EXPECT_EQ(a.total, reference_distribution(params, row).total);
    // Rows drawn side by side on the same pool: the nested pass runs inline, same draws.
    std::vector<int32_t> side_by_side(8), alone(8);
    pool.run(8, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) side_by_side[k] = pooled.sample_at(row, static_cast<uint64_t>(k)).id;
    });
    for (int k = 0; k < 8; ++k) alone[k] = serial.sample_at(row, static_cast<uint64_t>(k)).id;
    EXPECT_EQ(side_by_side, alone);
  }
}

// Flat rows put most of the vocabulary in top-p's candidate set (its radix-sorted path), with
// runs of equal logits, zeros of both signs and -inf among them.
TEST(SamplerReference, FlatRowsUnderTopP) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> flat(0.0f, 0.05f);
  std::uniform_int_distribution<int32_t> pick(0, 49999);
  for (float top_p : {0.95f, 0.5f}) {
    std::vector<float> row(50000);
    for (float& x : row) x = flat(rng);
    for (int i = 0; i < 3000; ++i) row[pick(rng)] = 0.03125f;  // ties
    for (int i = 0; i < 200; ++i) row[pick(rng)] = (i % 2 == 0) ? 0.0f : -0.0f;
    for (int i = 0; i < 500; ++i) row[pick(rng)] = kNegInf;
    SamplingParams params;
    params.temperature = 1.5f;
    params.top_p = top_p;
    const Sampler sampler(params, 1);
    const TokenDistribution want = reference_distribution(params, row);
    const TokenDistribution got = sampler.distribution(sampler.processed_logits(row));
    size_t kept = 0;
    for (double w : want.weights) kept += w > 0.0;
    EXPECT_GT(kept, 10000u) << "the candidate set must be large enough for the radix path";
    EXPECT_EQ(got.weights, want.weights) << top_p;
    EXPECT_EQ(got.total, want.total) << top_p;
  }
}

TEST(SamplerReference, RowsWithFewFiniteTokens) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 50;
  params.top_p = 0.9f;
  std::vector<float> row(1000, kNegInf);
  row[17] = 1.0f;
  row[400] = 1.0f;
  row[999] = 3.0f;
  const Sampler sampler(params, 1);
  const TokenDistribution got = sampler.distribution(sampler.processed_logits(row));
  const TokenDistribution want = reference_distribution(params, row);
  EXPECT_EQ(got.weights, want.weights);
  EXPECT_EQ(got.total, want.total);
}

TEST(SamplerReference, TopLogprobsAreTheMostLikelyIdsInOrder) {
  std::mt19937_64 rng(5);
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = true;
  params.top_logprobs = 20;
  std::vector<float> row = random_row(rng, 4096);
  const SampledToken t = Sampler(params, 1).sample(row);
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return more_likely(row, a, b); });
  ASSERT_EQ(t.top_logprobs.size(), 20u);
  for (size_t k = 0; k < 20; ++k) EXPECT_EQ(t.top_logprobs[k].id, ids[k]) << k;
  // Fewer finite tokens than asked: the -inf ones follow in id order.
  std::vector<float> sparse(64, kNegInf);
  sparse[9] = 2.0f;
  sparse[3] = 1.0f;
  const SampledToken s = Sampler(params, 1).sample(sparse);
  ASSERT_EQ(s.top_logprobs.size(), 20u);
  EXPECT_EQ(s.top_logprobs[0].id, 9);
  EXPECT_EQ(s.top_logprobs[1].id, 3);
  EXPECT_EQ(s.top_logprobs[2].id, 0);
  EXPECT_EQ(s.top_logprobs[3].id, 1);
  EXPECT_EQ(s.top_logprobs[4].id, 2);
  EXPECT_EQ(s.top_logprobs[5].id, 4);
}

}  // namespace
}  // namespace deltaserve::runtime
