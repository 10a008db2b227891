// The sampler's distribution and logprobs against a plain reference that applies each rule
// of runtime/sampler.h literally over the whole vocabulary (every token's mass, a full sort
// for top-k and top-p, a full sort for the top logprobs): the fast paths (radix selects of
// top-k's and top-p's prefixes, a heap for top logprobs) must give the same masses, total and
// ids bit for bit, on large random rows with -inf tokens, ties and every combination of the
// filters.
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

// runtime/sampler.h's rules, literally (a token's mass is draw_rule.h's token_mass, the rule's
// arithmetic; everything after it is spelled out here).
TokenDistribution reference_distribution(const SamplingParams& params, const std::vector<float>& l) {
  TokenDistribution dist;
  dist.mass.assign(l.size(), 0);
  const int32_t top = argmax_of(l);
  kernels::DrawParams p;
  p.inv_temperature = 1.0f / params.temperature;
  p.min_p = params.min_p;
  std::vector<uint64_t> m(l.size(), 0);
  std::vector<int32_t> kept;
  for (int32_t i = 0; i < static_cast<int32_t>(l.size()); ++i) {
    m[i] = kernels::draw::token_mass(l[i], l[top], p);
    if (m[i] > 0) kept.push_back(i);
  }
  auto by_likelihood = [&](int32_t a, int32_t b) { return more_likely(l, a, b); };
  std::sort(kept.begin(), kept.end(), by_likelihood);
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size()) kept.resize(params.top_k);
  if (params.top_p < 1.0f) {
    uint64_t total = 0;
    for (int32_t i : kept) total += m[i];
    const double target = std::ceil(static_cast<double>(params.top_p) * static_cast<double>(total));
    uint64_t mass = 0;
    size_t n = 0;
    while (n < kept.size() && static_cast<double>(mass) < target) mass += m[kept[n++]];
    kept.resize(std::max<size_t>(n, 1));
  }
  for (int32_t i : kept) {
    dist.mass[i] = m[i];
    dist.total += m[i];
  }
  return dist;
}

// The draw, literally: the first id whose running mass exceeds floor(total * word / 2^32).
int32_t reference_draw(const TokenDistribution& d, uint32_t word) {
  const long double point = std::floor(static_cast<long double>(d.total) * word / 4294967296.0L);
  uint64_t running = 0;
  for (size_t i = 0; i < d.mass.size(); ++i) {
    running += d.mass[i];
    if (static_cast<long double>(running) > point) return static_cast<int32_t>(i);
  }
  return -1;
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
          ASSERT_EQ(got.mass, want.mass) << "T " << t << " top_k " << k << " top_p " << p << " min_p " << m;
          for (uint32_t word : {0u, 1u, 0x9E3779B9u, 0xFFFFFFFFu, static_cast<uint32_t>(rng())})
            ASSERT_EQ(draw_token(got, word), reference_draw(want, word)) << word;
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
    EXPECT_EQ(a.mass, b.mass);
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

// Flat rows put most of the vocabulary in top-p's set (many radix digits to resolve), with
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
    for (uint64_t w : want.mass) kept += w > 0;
    EXPECT_GT(kept, 10000u) << "the kept set must be large";
    EXPECT_EQ(got.mass, want.mass) << top_p;
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
  EXPECT_EQ(got.mass, want.mass);
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
