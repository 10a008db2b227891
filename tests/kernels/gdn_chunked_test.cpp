// The chunked gated delta rule (gated_delta_rule_chunked) against the recurrent reference on
// fresh random inputs: lengths around the chunk edges, nonzero initial states, several heads
// with grouped key heads, the state handed from call to call, and the alignment rule (chunk
// edges at multiples of kGdnChunkRows from the sequence start, whatever the caller's split).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/gdn/gated_delta_rule.h"
#include "kernels/norm/norm.h"

namespace deltaserve::kernels {
namespace {

// One sequence's inputs for the rule, as the GDN layer feeds them: unit-norm k, q unit-norm
// times dk^-1/2, log decays of a fast and a slow head mix, beta in (0, 1).
struct RuleInputs {
  int64_t hk, hv, dk, dv, tokens;
  std::vector<float> q, k, v, g, beta, state;

  RuleInputs(int64_t hk_, int64_t hv_, int64_t dk_, int64_t dv_, int64_t tokens_, unsigned seed)
      : hk(hk_), hv(hv_), dk(dk_), dv(dv_), tokens(tokens_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n, float scale) {
      x.resize(n);
      for (float& e : x) e = scale * normal(rng);
    };
    fill(q, static_cast<size_t>(tokens * hk * dk), 1.0f);
    fill(k, q.size(), 1.0f);
    fill(v, static_cast<size_t>(tokens * hv * dv), 1.0f);
    fill(state, static_cast<size_t>(hv * dk * dv), 0.5f);
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (int64_t r = 0; r < tokens * hk; ++r) {
      l2_norm_ref(q.data() + r * dk, dk, 1e-6f);
      l2_norm_ref(k.data() + r * dk, dk, 1e-6f);
      for (int64_t e = 0; e < dk; ++e) q[static_cast<size_t>(r * dk + e)] *= q_scale;
    }
    g.resize(static_cast<size_t>(tokens * hv));
    beta.resize(g.size());
    // Head j's decay range: slow heads (near 0) and fast ones (down to -8 a row, so Gamma
    // falls by hundreds within a chunk and e^Gamma underflows, MODEL.md 3.4).
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < hv; ++j) {
        const float depth = j % 3 == 0 ? 0.05f : j % 3 == 1 ? 1.0f : 8.0f;
        g[static_cast<size_t>(t * hv + j)] = -depth * unit(rng);
        beta[static_cast<size_t>(t * hv + j)] = unit(rng);
      }
    }
  }

  // Args over rows [first, first + rows), writing out rows [first, ...) of `out`, state in `s`.
  GatedDeltaRuleArgs args(int64_t first, int64_t rows, std::vector<float>& out, std::vector<float>& s) {
    GatedDeltaRuleArgs a{};
    a.q = q.data() + first * hk * dk;
    a.k = k.data() + first * hk * dk;
    a.qk_stride = hk * dk;
    a.v = v.data() + first * hv * dv;
    a.v_stride = hv * dv;
    a.g = g.data() + first * hv;
    a.beta = beta.data() + first * hv;
    a.out = out.data() + first * hv * dv;
    a.out_stride = hv * dv;
    a.state = s.data();
    a.num_tokens = rows;
    a.num_k_heads = hk;
    a.num_v_heads = hv;
    a.head_dim_k = dk;
    a.head_dim_v = dv;
    a.first_position = first;
    return a;
  }
};

// max |a - b| / max |b|: the error relative to the tensor's scale (single entries near 0 make
// an elementwise relative error meaningless).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

// The recurrent and chunked forms are f32 chains of the same algebra (gated_delta_rule_chunked.cpp
// reasons the bound); a wrong decay, row or chunk edge gives errors of order 1.
constexpr double kTolerance = 1e-4;

struct LengthCase {
  int64_t hk, hv, dk, dv, tokens;
};

class GdnChunkedTest : public ::testing::TestWithParam<LengthCase> {};

TEST_P(GdnChunkedTest, MatchesRecurrentFromNonzeroState) {
  const LengthCase p = GetParam();
  RuleInputs in(p.hk, p.hv, p.dk, p.dv, p.tokens, 17u + static_cast<unsigned>(p.tokens));
  std::vector<float> ref_out(in.v.size()), out(in.v.size(), NAN);
  std::vector<float> ref_state = in.state, state = in.state;
  gated_delta_rule_ref(in.args(0, p.tokens, ref_out, ref_state), serial_for());
  gated_delta_rule_chunked(in.args(0, p.tokens, out, state), serial_for());
  EXPECT_LT(relative_error(out, ref_out), kTolerance);
  EXPECT_LT(relative_error(state, ref_state), kTolerance);
}

// The state handed from call to call: a sequence prefilled in three calls cut anywhere agrees
// with the recurrent form to the same tolerance; cut on multiples of the chunk it equals one
// chunked call bit for bit (the alignment rule).
TEST_P(GdnChunkedTest, StateCarriesAcrossCalls) {
  const LengthCase p = GetParam();
  if (p.tokens < 3) GTEST_SKIP();
  RuleInputs in(p.hk, p.hv, p.dk, p.dv, p.tokens, 91u + static_cast<unsigned>(p.tokens));
  std::vector<float> ref_out(in.v.size()), one_out(in.v.size());
  std::vector<float> ref_state = in.state, one_state = in.state;
  gated_delta_rule_ref(in.args(0, p.tokens, ref_out, ref_state), serial_for());
  gated_delta_rule_chunked(in.args(0, p.tokens, one_out, one_state), serial_for());

  const auto split = [&](int64_t cut1, int64_t cut2, std::vector<float>& out, std::vector<float>& state) {
    const int64_t cuts[] = {0, cut1, cut2, p.tokens};
    for (int c = 0; c < 3; ++c) gated_delta_rule_chunked(in.args(cuts[c], cuts[c + 1] - cuts[c], out, state), serial_for());
  };
  std::vector<float> odd_out(in.v.size()), odd_state = in.state;
  split(p.tokens / 3, p.tokens / 3 + 1 + p.tokens / 5, odd_out, odd_state);
  EXPECT_LT(relative_error(odd_out, ref_out), kTolerance);
  EXPECT_LT(relative_error(odd_state, ref_state), kTolerance);

  const int64_t aligned1 = std::min(p.tokens, kGdnChunkRows), aligned2 = std::min(p.tokens, 3 * kGdnChunkRows);
  std::vector<float> al_out(in.v.size()), al_state = in.state;
  split(aligned1, aligned2, al_out, al_state);
  EXPECT_EQ(al_out, one_out);
  EXPECT_EQ(al_state, one_state);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GdnChunkedTest,
                         ::testing::Values(LengthCase{2, 6, 16, 8, 1}, LengthCase{2, 6, 16, 8, 63},
                                           LengthCase{2, 6, 16, 8, 64}, LengthCase{2, 6, 16, 8, 65},
                                           LengthCase{1, 3, 32, 16, 200}, LengthCase{2, 4, 32, 32, 1000},
                                           LengthCase{1, 2, 128, 128, 200}, LengthCase{3, 3, 7, 5, 130}));

// A call that starts mid-chunk (a resume point at position 100) cuts its first chunk at the
// next multiple of kGdnChunkRows: its later chunks are those of the uncut sequence, so once
// the cut chunk is behind, every chunk's rows agree with the uncut sequence's to the
// tolerance, and a further aligned cut changes no bit.
TEST(GdnChunkedAlignment, ChunksFollowAbsolutePositions) {
  RuleInputs in(2, 4, 16, 16, 300, 5u);
  std::vector<float> whole_out(in.v.size()), whole_state = in.state;
  gated_delta_rule_chunked(in.args(0, 300, whole_out, whole_state), serial_for());
  // Resumed at 100 (state from the recurrent form there), once as [100, 300) and once as
  // [100, 128) + [128, 300): the same bits, since both cut at 128, 192, 256.
  std::vector<float> head_out(in.v.size()), head_state = in.state;
  gated_delta_rule_ref(in.args(0, 100, head_out, head_state), serial_for());
  std::vector<float> a_out = head_out, a_state = head_state, b_out = head_out, b_state = head_state;
  gated_delta_rule_chunked(in.args(100, 200, a_out, a_state), serial_for());
  gated_delta_rule_chunked(in.args(100, 28, b_out, b_state), serial_for());
  gated_delta_rule_chunked(in.args(128, 172, b_out, b_state), serial_for());
  EXPECT_EQ(a_out, b_out);
  EXPECT_EQ(a_state, b_state);
  EXPECT_LT(relative_error(a_out, whole_out), kTolerance);
  EXPECT_LT(relative_error(a_state, whole_state), kTolerance);
}

// Split-independence of the thread pool: heads split unevenly give the same bits.
TEST(GdnChunkedAlignment, ParallelSplitChangesNoBit) {
  class OddSplit final : public ParallelFor {
   public:
    void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
      for (int64_t b = n; b > 0; b -= 2) fn(std::max<int64_t>(0, b - 2), b);
    }
  };
  RuleInputs in(2, 6, 16, 8, 150, 8u);
  std::vector<float> a_out(in.v.size()), b_out(in.v.size()), a_state = in.state, b_state = in.state;
  gated_delta_rule_chunked(in.args(0, 150, a_out, a_state), serial_for());
  gated_delta_rule_chunked(in.args(0, 150, b_out, b_state), OddSplit());
  EXPECT_EQ(a_out, b_out);
  EXPECT_EQ(a_state, b_state);
}

}  // namespace
}  // namespace deltaserve::kernels
