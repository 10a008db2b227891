// The draw rule's pieces (kernels/sampling/draw_rule.h, draw_ref.h): the exp it defines is
// close to the true one, likelihood keys order tokens as the sampler does, the prefix select
// equals a sort, and draw_ref equals a literal walk.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "kernels/sampling/draw_ref.h"
#include "kernels/sampling/draw_rule.h"

namespace deltaserve::kernels {
namespace {

TEST(DrawRule, ExpIsWithinAFewUlpOfTheTrueOne) {
  double worst = 0;
  for (float a = draw::kMinArgument; a <= 0.0f; a += 1.0f / 4096.0f) {
    const double want = std::exp(static_cast<double>(a));
    worst = std::max(worst, std::abs(draw::exp_nonpositive(a) - want) / want);
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(draw::exp_nonpositive(0.0f), 1.0f);
}

TEST(DrawRule, MassesFollowTheirDefinition) {
  DrawParams p;
  p.inv_temperature = 1.0f / 0.7f;
  EXPECT_EQ(draw::token_mass(3.0f, 3.0f, p), uint64_t{1} << 40);  // the top weighs 2^40
  EXPECT_EQ(draw::token_mass(-std::numeric_limits<float>::infinity(), 3.0f, p), 0u);
  EXPECT_EQ(draw::token_mass(std::numeric_limits<float>::quiet_NaN(), 3.0f, p), 0u);
  EXPECT_EQ(draw::token_mass(3.0f - 0.7f * 29.0f, 3.0f, p), 0u);  // under 2^-40 of the top
  EXPECT_GT(draw::token_mass(3.0f - 0.7f * 27.0f, 3.0f, p), 0u);
  p.min_p = 0.5f;
  EXPECT_EQ(draw::token_mass(3.0f - 0.7f, 3.0f, p), 0u);  // e^-1 < 0.5
  EXPECT_GT(draw::token_mass(3.0f - 0.7f * 0.5f, 3.0f, p), 0u);
}

TEST(DrawRule, LikelihoodKeysOrderByLogitThenId) {
  EXPECT_LT(draw::likelihood_key(2.0f, 9), draw::likelihood_key(1.0f, 0));
  EXPECT_LT(draw::likelihood_key(-1.0f, 9), draw::likelihood_key(-2.0f, 0));
  EXPECT_LT(draw::likelihood_key(1.0f, 3), draw::likelihood_key(1.0f, 4));
  EXPECT_EQ(draw::likelihood_key(0.0f, 5), draw::likelihood_key(-0.0f, 5));
  EXPECT_LT(draw::likelihood_key(0.5f, 5), draw::likelihood_key(-0.5f, 5));
}

TEST(DrawRule, TargetsStayInRange) {
  EXPECT_EQ(draw::top_p_target(1000, 0.95f), 950u);
  EXPECT_EQ(draw::top_p_target(10, 0.01f), 1u);  // one token at least
  EXPECT_EQ(draw::top_p_target(7, 0.5f), 4u);    // ceil
  EXPECT_EQ(draw::draw_target(1000, 0), 0u);
  EXPECT_EQ(draw::draw_target(1000, 0xFFFFFFFFu), 999u);
  EXPECT_EQ(draw::draw_target(uint64_t{1} << 58, 1u << 31), uint64_t{1} << 57);
}

TEST(DrawRule, PrefixSelectEqualsASort) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 3000;
    std::vector<std::pair<uint64_t, uint64_t>> items(n);
    for (auto& [key, w] : items) {
      key = (rng() % 4 == 0) ? (rng() % 64) << 32 | (rng() & 0xFFFFF) : rng() >> 1;  // shared high digits too
      w = rng() % 5 == 0 ? 1 : rng() % (uint64_t{1} << 40);
    }
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end(), [](auto& a, auto& b) { return a.first == b.first; }), items.end());
    uint64_t total = 0;
    for (const auto& item : items) total += item.second;
    const uint64_t target = 1 + rng() % total;
    uint64_t running = 0, want = 0;
    for (const auto& item : items) {
      running += item.second;
      if (running >= target) {
        want = item.first;
        break;
      }
    }
    std::shuffle(items.begin(), items.end(), rng);
    ASSERT_EQ(select_prefix_key(items, target), want) << round;
  }
}

TEST(DrawRule, DrawRefIsTheArgmaxForANonFiniteTop) {
  std::vector<float> row = {0.0f, std::numeric_limits<float>::infinity(), 1.0f};
  EXPECT_EQ(draw_ref(row.data(), 3, DrawParams{}), 1);
  std::vector<float> dead(5, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(draw_ref(dead.data(), 5, DrawParams{}), 0);
  EXPECT_THROW(draw_ref(row.data(), 0, DrawParams{}), std::invalid_argument);
}

}  // namespace
}  // namespace deltaserve::kernels
