// Sampler: distributions (chi-squared over 100k draws on fixed logits), greedy, penalties,
// logit bias, logprobs, seeded determinism independent of the batch, finish conditions.
#include "runtime/sampler.h"

#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

namespace deltaserve::runtime {
namespace {

const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, -0.5f, 2.5f};
constexpr int kNumDraws = 100000;
// Chi-squared critical values at alpha = 0.001 by degrees of freedom (index = df).
constexpr double kChi2Critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};

// Independent formula for the expected distribution: softmax(l / T) restricted to `keep`.
std::vector<double> expected_probs(double temperature, const std::vector<bool>& keep) {
  std::vector<double> p(kLogits.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) {
    if (keep[i]) total += p[i] = std::exp(kLogits[i] / temperature);
  }
  for (double& x : p) x /= total;
  return p;
}

std::vector<bool> keep_all() { return std::vector<bool>(kLogits.size(), true); }

// Draws kNumDraws tokens at positions 0..n-1 and checks the histogram against `expected`.
void expect_distribution(const SamplingParams& params, const std::vector<double>& expected) {
  Sampler sampler(params, /*seed=*/20261130);
  std::vector<int> counts(kLogits.size(), 0);
  for (int n = 0; n < kNumDraws; ++n) ++counts[sampler.sample_at(kLogits, n).id];
  double chi2 = 0;
  int num_cells = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " must never be drawn";
      continue;
    }
    const double e = expected[i] * kNumDraws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++num_cells;
  }
  ASSERT_GE(num_cells, 2);
  EXPECT_LT(chi2, kChi2Critical[num_cells - 1]) << "chi-squared with " << num_cells - 1 << " df";
}

TEST(Sampler, PhiloxKnownAnswer) {
  // Random123's known-answer vector for philox4x32-10 with zero key and counter.
  const auto out = philox4x32(0, 0);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(Sampler, TemperatureDistribution) {
  SamplingParams p;
  p.temperature = 0.7f;
  expect_distribution(p, expected_probs(0.7, keep_all()));
}

TEST(Sampler, TopKDistribution) {
  SamplingParams p;
  p.top_k = 3;  // logits 2.5 (id 7), 2.0 (id 1), 1.5 (id 4)
  std::vector<bool> keep(kLogits.size(), false);
  keep[7] = keep[1] = keep[4] = true;
  expect_distribution(p, expected_probs(1.0, keep));
}

TEST(Sampler, TopPDistribution) {
  SamplingParams p;
  p.top_p = 0.8f;
  // Smallest most-likely set with mass >= 0.8, computed independently.
  const auto full = expected_probs(1.0, keep_all());
  std::vector<size_t> order(kLogits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return full[a] > full[b]; });
  std::vector<bool> keep(kLogits.size(), false);
  double mass = 0;
  for (size_t i : order) {
    if (mass >= 0.8) break;
    keep[i] = true;
    mass += full[i];
  }
  expect_distribution(p, expected_probs(1.0, keep));
}

TEST(Sampler, MinPDistribution) {
  SamplingParams p;
  p.min_p = 0.2f;
  p.temperature = 1.0f;
  const auto full = expected_probs(1.0, keep_all());
  const double p_max = *std::max_element(full.begin(), full.end());
  std::vector<bool> keep(kLogits.size());
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = full[i] >= 0.2 * p_max;
  EXPECT_EQ(std::count(keep.begin(), keep.end(), true), 4);  // 2.5, 2.0, 1.5, 1.0
  expect_distribution(p, expected_probs(1.0, keep));
}

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p, 1);
  EXPECT_EQ(s.sample(kLogits).id, 7);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 5.0f, 5.0f, 1.0f}).id, 1);
}

// Temperatures whose reciprocal overflows a float (the API takes any value in (0, 2]) still
// draw the most likely token, never id 0 for want of any mass; on the backends too
// (draw_params_of builds their parameters).
TEST(Sampler, SubnormalTemperatureDrawsTheArgmax) {
  for (const float temperature : {1e-39f, 1e-45f, 1e-30f}) {
    SamplingParams params;
    params.temperature = temperature;
    const Sampler sampler(params, 5);
    const kernels::DrawParams draw = draw_params_of(params, 5, 0);
    EXPECT_TRUE(std::isfinite(draw.inv_temperature)) << temperature;
    for (int n = 0; n < 50; ++n) {
      EXPECT_EQ(sampler.sample_at(kLogits, n).id, 7) << "temperature " << temperature;
      EXPECT_EQ(kernels::draw_ref(kLogits.data(), static_cast<int64_t>(kLogits.size()), draw_params_of(params, 5, n)), 7);
    }
  }
}

TEST(Sampler, LogitBiasAndPenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{0, 10.0f}, {99, 5.0f}};  // out-of-range ids are ignored
  EXPECT_EQ(Sampler(p, 1).sample(kLogits).id, 0);

  SamplingParams rep;
  rep.repetition_penalty = 2.0f;
  Sampler s(rep, 1);
  const std::vector<int32_t> prompt = {7, 3};
  s.set_prompt(prompt);
  s.accept(1);
  const auto v = s.processed_logits(kLogits);
  EXPECT_FLOAT_EQ(v[7], 1.25f);   // positive: divided
  EXPECT_FLOAT_EQ(v[3], -2.0f);   // negative: multiplied
  EXPECT_FLOAT_EQ(v[1], 1.0f);    // output tokens too
  EXPECT_FLOAT_EQ(v[0], 1.0f);    // untouched

  SamplingParams freq;
  freq.frequency_penalty = 0.5f;
  freq.presence_penalty = 0.25f;
  Sampler f(freq, 1);
  f.set_prompt(prompt);  // prompt tokens do not count for these
  f.accept(4);
  f.accept(4);
  const auto w = f.processed_logits(kLogits);
  EXPECT_FLOAT_EQ(w[4], 1.5f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(w[7], 2.5f);
}

// A repetition penalty so small that a repeated token's logit would overflow (the API takes
// any value > 0): the logprobs stay numbers (an infinite logit made them all NaN) and the
// boosted token is drawn, greedy or sampled.
TEST(Sampler, TinyRepetitionPenaltyKeepsLogprobsFinite) {
  for (const float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.repetition_penalty = 1e-39f;
    p.logprobs = true;
    p.top_logprobs = 2;
    Sampler s(p, 3);
    const std::vector<int32_t> prompt = {4, 5};  // logits 1.5 and 0.0: only 4 is raised
    s.set_prompt(prompt);
    for (int n = 0; n < 20; ++n) {
      const SampledToken t = s.sample_at(kLogits, n);
      EXPECT_EQ(t.id, 4) << "temperature " << temperature;
      EXPECT_TRUE(std::isfinite(t.logprob)) << t.logprob;
      ASSERT_EQ(t.top_logprobs.size(), 2u);
      EXPECT_EQ(t.top_logprobs[0].id, 4);
      for (const TokenLogprob& alt : t.top_logprobs) EXPECT_FALSE(std::isnan(alt.logprob));
    }
  }
}

TEST(Sampler, LogprobsAreTheProcessedDistributionBeforeTemperature) {
  SamplingParams p;
  p.temperature = 0.3f;
  p.top_k = 2;
  p.logprobs = true;
  p.top_logprobs = 3;
  const SampledToken t = Sampler(p, 5).sample(kLogits);
  const auto probs = expected_probs(1.0, keep_all());
  EXPECT_NEAR(t.logprob, std::log(probs[t.id]), 1e-5);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].id, 7);
  EXPECT_EQ(t.top_logprobs[1].id, 1);
  EXPECT_EQ(t.top_logprobs[2].id, 4);
  EXPECT_NEAR(t.top_logprobs[0].logprob, std::log(probs[7]), 1e-5);
}

TEST(Sampler, SeededDrawsDoNotDependOnTheBatch) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.95f;
  auto run = [&](uint64_t seed, bool interleave) {
    Sampler a(p, seed), other(p, 777);
    std::vector<int32_t> out;
    for (int n = 0; n < 200; ++n) {
      if (interleave) other.accept(other.sample(kLogits).id);  // another request in the batch
      const int32_t id = a.sample(kLogits).id;
      a.accept(id);
      out.push_back(id);
    }
    return out;
  };
  EXPECT_EQ(run(42, false), run(42, true));
  EXPECT_NE(run(42, false), run(43, false));
  // Positions are explicit: drawing them out of order changes nothing.
  Sampler s(p, 42);
  const auto in_order = run(42, false);
  for (int n = 199; n >= 0; --n) EXPECT_EQ(s.sample_at(kLogits, n).id, in_order[n]);
}

}  // namespace
}  // namespace deltaserve::runtime
