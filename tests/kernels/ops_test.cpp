// CPU reference kernels against independent double-precision formulas on fresh random
// inputs, plus the properties the runtime relies on (state hand-off, snapshots, splits).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/dtype.h"
#include "kernels/gdn/conv1d.h"
#include "kernels/gdn/gated_delta_rule.h"
#include "kernels/matmul/matmul.h"
#include "kernels/moe/moe.h"
#include "kernels/norm/norm.h"
#include "kernels/quant.h"
#include "kernels/rope/rope.h"

namespace deltaserve::kernels {
namespace {

std::vector<float> random_vector(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Splits ranges unevenly and in reverse to catch kernels that depend on the split.
class ReverseSplitFor final : public ParallelFor {
 public:
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    int64_t end = n;
    for (int64_t size = 1; end > 0; size = size * 2 + 1) {
      const int64_t begin = std::max<int64_t>(0, end - size);
      fn(begin, end);
      end = begin;
    }
  }
};

struct GdnCase {
  int64_t num_k_heads, num_v_heads, dk, dv, num_tokens;
};

class GatedDeltaRuleTest : public ::testing::TestWithParam<GdnCase> {};

TEST_P(GatedDeltaRuleTest, MatchesClosedFormInDouble) {
  const GdnCase p = GetParam();
  std::mt19937 rng(1234 + static_cast<unsigned>(p.num_tokens * 7 + p.num_v_heads));
  const int64_t qk_stride = p.num_k_heads * p.dk, v_stride = p.num_v_heads * p.dv;
  std::vector<float> q = random_vector(rng, static_cast<size_t>(p.num_tokens * qk_stride));
  std::vector<float> k = random_vector(rng, q.size());
  std::vector<float> v = random_vector(rng, static_cast<size_t>(p.num_tokens * v_stride));
  // Unit-norm keys as the layer feeds them.
  for (int64_t t = 0; t < p.num_tokens * p.num_k_heads; ++t) l2_norm_ref(k.data() + t * p.dk, p.dk, 1e-6f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> g(static_cast<size_t>(p.num_tokens * p.num_v_heads)), beta(g.size());
  for (float& x : g) x = -3.0f * unit(rng);
  for (float& x : beta) x = unit(rng);
  std::vector<float> state = random_vector(rng, static_cast<size_t>(p.num_v_heads * p.dk * p.dv), 0.5f);
  std::vector<double> ref_state(state.begin(), state.end());

  std::vector<float> out(static_cast<size_t>(p.num_tokens * v_stride));
  std::vector<float> snapshots(static_cast<size_t>(p.num_tokens) * state.size());
  GatedDeltaRuleArgs args{q.data(), k.data(), qk_stride, v.data(), v_stride, g.data(), beta.data(),
                          out.data(), v_stride, state.data(), p.num_tokens, p.num_k_heads, p.num_v_heads,
                          p.dk, p.dv, snapshots.data()};
  gated_delta_rule_ref(args, ReverseSplitFor());

  // S_t = exp(g) (I - beta k k^T) S + beta k v^T ; o = S_t^T q, per value head.
  std::vector<double> ref_out(out.size()), ref_snap(snapshots.size());
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    for (int64_t j = 0; j < p.num_v_heads; ++j) {
      const int64_t kh = j % p.num_k_heads;
      const float* kt = k.data() + t * qk_stride + kh * p.dk;
      const float* qt = q.data() + t * qk_stride + kh * p.dk;
      const float* vt = v.data() + t * v_stride + j * p.dv;
      const double decay = std::exp(static_cast<double>(g[static_cast<size_t>(t * p.num_v_heads + j)]));
      const double b = beta[static_cast<size_t>(t * p.num_v_heads + j)];
      double* S = ref_state.data() + j * p.dk * p.dv;
      for (int64_t c = 0; c < p.dv; ++c) {
        double ktS = 0.0;
        for (int64_t i = 0; i < p.dk; ++i) ktS += kt[i] * S[i * p.dv + c];
        for (int64_t i = 0; i < p.dk; ++i)
          S[i * p.dv + c] = decay * (S[i * p.dv + c] - b * kt[i] * ktS) + b * kt[i] * vt[c];
        double o = 0.0;
        for (int64_t i = 0; i < p.dk; ++i) o += S[i * p.dv + c] * qt[i];
        ref_out[static_cast<size_t>(t * v_stride + j * p.dv + c)] = o;
      }
    }
    std::copy(ref_state.begin(), ref_state.end(), ref_snap.begin() + static_cast<long>(t * ref_state.size()));
  }
  EXPECT_LT(max_abs_diff(out, ref_out), 1e-4);
  EXPECT_LT(max_abs_diff(state, ref_state), 1e-4);
  EXPECT_LT(max_abs_diff(snapshots, ref_snap), 1e-4);
}

TEST_P(GatedDeltaRuleTest, SplittingRowsHandsOffStateExactly) {
  const GdnCase p = GetParam();
  if (p.num_tokens < 2) GTEST_SKIP();
  std::mt19937 rng(99);
  const int64_t qk_stride = p.num_k_heads * p.dk, v_stride = p.num_v_heads * p.dv;
  std::vector<float> q = random_vector(rng, static_cast<size_t>(p.num_tokens * qk_stride)), k = random_vector(rng, q.size());
  std::vector<float> v = random_vector(rng, static_cast<size_t>(p.num_tokens * v_stride));
  std::vector<float> g(static_cast<size_t>(p.num_tokens * p.num_v_heads), -0.5f), beta(g.size(), 0.7f);
  std::vector<float> whole_state(static_cast<size_t>(p.num_v_heads * p.dk * p.dv), 0.0f), split_state = whole_state;
  std::vector<float> whole_out(static_cast<size_t>(p.num_tokens * v_stride)), split_out(whole_out.size());
  GatedDeltaRuleArgs whole{q.data(), k.data(), qk_stride, v.data(), v_stride, g.data(), beta.data(), whole_out.data(),
                           v_stride, whole_state.data(), p.num_tokens, p.num_k_heads, p.num_v_heads, p.dk, p.dv};
  gated_delta_rule_ref(whole, serial_for());
  const int64_t first = p.num_tokens / 2;
  GatedDeltaRuleArgs a = whole, b = whole;
  a.out = split_out.data();
  a.state = split_state.data();
  a.num_tokens = first;
  b = a;
  b.q += first * qk_stride;
  b.k += first * qk_stride;
  b.v += first * v_stride;
  b.g += first * p.num_v_heads;
  b.beta += first * p.num_v_heads;
  b.out += first * v_stride;
  b.num_tokens = p.num_tokens - first;
  gated_delta_rule_ref(a, serial_for());
  gated_delta_rule_ref(b, serial_for());
  EXPECT_EQ(whole_out, split_out);
  EXPECT_EQ(whole_state, split_state);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatedDeltaRuleTest,
                         ::testing::Values(GdnCase{1, 1, 8, 8, 1}, GdnCase{2, 4, 16, 16, 5}, GdnCase{2, 6, 16, 8, 17},
                                           GdnCase{3, 3, 7, 5, 9}, GdnCase{1, 3, 32, 16, 3}));

TEST(CausalConvTest, MatchesNaiveAndStreamsLikeOneCall) {
  std::mt19937 rng(7);
  const int64_t channels = 13, kernel = 4, tokens = 9;
  std::vector<float> x = random_vector(rng, static_cast<size_t>(tokens * channels));
  std::vector<float> w = random_vector(rng, static_cast<size_t>(channels * kernel));
  std::vector<float> state0 = random_vector(rng, static_cast<size_t>((kernel - 1) * channels));
  std::vector<float> state = state0, y(x.size()), snaps(static_cast<size_t>(tokens) * state.size());
  causal_conv1d_silu_ref({x.data(), channels, y.data(), channels, state.data(), w.data(), tokens, channels, kernel,
                          snaps.data()},
                         ReverseSplitFor());
  std::vector<double> ref(y.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0.0;
      for (int64_t j = 0; j < kernel; ++j) {
        const int64_t src = t - (kernel - 1) + j;  // token index; negative -> state
        const double value = src >= 0 ? x[static_cast<size_t>(src * channels + c)]
                                      : state0[static_cast<size_t>((kernel - 1 + src) * channels + c)];
        sum += w[static_cast<size_t>(c * kernel + j)] * value;
      }
      ref[static_cast<size_t>(t * channels + c)] = sum / (1.0 + std::exp(-sum));
    }
  }
  EXPECT_LT(max_abs_diff(y, ref), 1e-5);
  // The state holds the last kernel-1 inputs, oldest first.
  for (int64_t j = 0; j < kernel - 1; ++j)
    for (int64_t c = 0; c < channels; ++c)
      EXPECT_EQ(state[static_cast<size_t>(j * channels + c)], x[static_cast<size_t>((tokens - 3 + j) * channels + c)]);
  // Token by token gives the same outputs, states and snapshots.
  std::vector<float> step_state = state0, step_y(y.size());
  for (int64_t t = 0; t < tokens; ++t) {
    causal_conv1d_silu_ref({x.data() + t * channels, channels, step_y.data() + t * channels, channels,
                            step_state.data(), w.data(), 1, channels, kernel},
                           serial_for());
    EXPECT_EQ(std::vector<float>(snaps.begin() + static_cast<long>(t * step_state.size()),
                                 snaps.begin() + static_cast<long>((t + 1) * step_state.size())),
              step_state);
  }
  EXPECT_EQ(y, step_y);
  EXPECT_EQ(state, step_state);
}

TEST(PagedAttentionTest, MatchesContiguousSoftmaxWithShuffledBlocks) {
  std::mt19937 rng(11);
  const int64_t heads = 4, kv_heads = 2, hd = 16, block_tokens = 3, context = 10, rows = 3;
  const std::vector<int32_t> block_table = {5, 0, 3, 1};  // 4 blocks cover 12 positions
  const int64_t kv_row = kv_heads * hd;
  std::vector<float> kc = random_vector(rng, static_cast<size_t>(6 * block_tokens * kv_row));
  std::vector<float> vc = random_vector(rng, kc.size());
  std::vector<float> q = random_vector(rng, static_cast<size_t>(rows * heads * 2 * hd));
  const std::vector<int32_t> positions = {context - 3, context - 2, context - 1};
  std::vector<float> out(static_cast<size_t>(rows * heads * hd));
  PagedAttentionArgs args{q.data(), q.data() + hd, heads * 2 * hd, 2 * hd, out.data(), heads * hd, kc.data(), vc.data(),
                          block_table.data(), block_tokens, positions.data(), rows, heads, kv_heads, hd,
                          1.0f / std::sqrt(static_cast<float>(hd))};
  paged_attention_ref(args, ReverseSplitFor());
  std::vector<double> ref(out.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q.data() + r * heads * 2 * hd + h * 2 * hd;
      const int64_t kvh = h / (heads / kv_heads);
      std::vector<double> s;
      for (int64_t p = 0; p <= positions[static_cast<size_t>(r)]; ++p) {
        const int64_t at = (block_table[static_cast<size_t>(p / block_tokens)] * block_tokens + p % block_tokens) * kv_row + kvh * hd;
        double dot = 0.0;
        for (int64_t i = 0; i < hd; ++i) dot += qh[i] * kc[static_cast<size_t>(at + i)];
        s.push_back(dot / std::sqrt(static_cast<double>(hd)));
      }
      double mx = -1e300, total = 0.0;
      for (double v : s) mx = std::max(mx, v);
      for (double& v : s) total += (v = std::exp(v - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0.0;
        for (int64_t p = 0; p < static_cast<int64_t>(s.size()); ++p) {
          const int64_t at = (block_table[static_cast<size_t>(p / block_tokens)] * block_tokens + p % block_tokens) * kv_row + kvh * hd;
          o += s[static_cast<size_t>(p)] / total * vc[static_cast<size_t>(at + i)];
        }
        const double gate = qh[hd + i];
        ref[static_cast<size_t>(r * heads * hd + h * hd + i)] = o / (1.0 + std::exp(-gate));
      }
    }
  }
  EXPECT_LT(max_abs_diff(out, ref), 1e-5);
}

TEST(RopeTest, RotatesOnlyTheFirstDimsWithNeoxPairing) {
  std::mt19937 rng(3);
  const int64_t heads = 2, hd = 8, rope = 4, rows = 2;
  std::vector<float> x = random_vector(rng, static_cast<size_t>(rows * heads * hd)), x0 = x;
  const std::vector<int32_t> positions = {0, 7};
  rope_neox_ref({x.data(), heads * hd, hd, positions.data(), rows, heads, rope, 10000.0f});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = x0.data() + r * heads * hd + h * hd;
      const float* b = x.data() + r * heads * hd + h * hd;
      for (int64_t i = 0; i < rope / 2; ++i) {
        const double theta = positions[static_cast<size_t>(r)] * std::pow(10000.0, -2.0 * static_cast<double>(i) / rope);
        EXPECT_NEAR(b[i], a[i] * std::cos(theta) - a[i + rope / 2] * std::sin(theta), 1e-5);
        EXPECT_NEAR(b[i + rope / 2], a[i + rope / 2] * std::cos(theta) + a[i] * std::sin(theta), 1e-5);
      }
      for (int64_t i = rope; i < hd; ++i) EXPECT_EQ(b[i], a[i]);
    }
  }
}

TEST(NormTest, RmsNormAndGatedNormMatchDouble) {
  std::mt19937 rng(5);
  const int64_t rows = 3, n = 24;
  std::vector<float> x = random_vector(rng, static_cast<size_t>(rows * n)), z = random_vector(rng, x.size());
  std::vector<float> w = random_vector(rng, static_cast<size_t>(n)), y(x.size()), gy(x.size());
  rms_norm_ref({x.data(), n, w.data(), y.data(), n, rows, n, 1e-6f}, ReverseSplitFor());
  gated_rms_norm_ref({x.data(), z.data(), w.data(), gy.data(), rows, n, 1e-6f}, ReverseSplitFor());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[static_cast<size_t>(r * n + i)]) * x[static_cast<size_t>(r * n + i)];
    const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(r * n + i);
      EXPECT_NEAR(y[at], x[at] * inv * w[static_cast<size_t>(i)], 1e-5);
      const double silu = z[at] / (1.0 + std::exp(-static_cast<double>(z[at])));
      EXPECT_NEAR(gy[at], x[at] * inv * w[static_cast<size_t>(i)] * silu, 1e-5);
    }
  }
}

TEST(MoeRouteTest, SoftmaxTopKRenormalised) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 0.1f, 1.5f};  // one row, six experts
  std::vector<int32_t> ids(3);
  std::vector<float> weights(3);
  moe_route_ref({logits.data(), 1, 6, 3, ids.data(), weights.data()});
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5}));  // tie between 1 and 3 -> lower id first
  const double e2 = std::exp(2.0), e15 = std::exp(1.5), total = 2 * e2 + e15;
  EXPECT_NEAR(weights[0], e2 / total, 1e-6);
  EXPECT_NEAR(weights[1], e2 / total, 1e-6);
  EXPECT_NEAR(weights[2], e15 / total, 1e-6);
}

// moe_down_combine_ref against its definition built from matmul_ref: one rank of weight 1 and
// one of weight 0 give exactly the first expert's product (expert slices padded past their
// rows, so the slice stride is expert_bytes, not n rows); the shared expert at gate logit 0
// adds half its product; accumulate adds y's old value.
TEST(MoeDownCombineRefTest, MatchesProductsAndWeights) {
  std::mt19937 rng(5);
  const int64_t n = 16, exp_in = 64, sh_in = 32, experts = 3;
  const size_t exp_rb = dtype_row_bytes(DType::Q4_0, exp_in), sh_rb = dtype_row_bytes(DType::Q4_0, sh_in);
  const size_t expert_bytes = exp_rb * static_cast<size_t>(n) + 36;  // a padded slice
  std::vector<uint8_t> w_exp(expert_bytes * experts), w_sh(sh_rb * static_cast<size_t>(n));
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t o = 0; o < n; ++o) {
      const std::vector<float> row = random_vector(rng, static_cast<size_t>(exp_in));
      quantize_row(DType::Q4_0, row.data(), w_exp.data() + e * expert_bytes + o * exp_rb, exp_in);
    }
  }
  for (int64_t o = 0; o < n; ++o) {
    const std::vector<float> row = random_vector(rng, static_cast<size_t>(sh_in));
    quantize_row(DType::Q4_0, row.data(), w_sh.data() + o * sh_rb, sh_in);
  }
  const std::vector<float> g = random_vector(rng, static_cast<size_t>(2 * exp_in)), sg = random_vector(rng, sh_in);
  const std::vector<int32_t> ids = {2, 1};
  const std::vector<float> weights = {1.0f, 0.0f}, gate_logit = {0.0f};
  auto product = [&](const uint8_t* w, size_t rb, int64_t in, const float* x) {
    std::vector<float> out(static_cast<size_t>(n));
    matmul_ref(MatmulArgs{w, DType::Q4_0, in, n, rb, x, 1, in, out.data(), n}, serial_for());
    return out;
  };
  const std::vector<float> expert = product(w_exp.data() + 2 * expert_bytes, exp_rb, exp_in, g.data());
  const std::vector<float> shared = product(w_sh.data(), sh_rb, sh_in, sg.data());

  std::vector<float> y(static_cast<size_t>(n), 7.0f);
  MoeDownCombineArgs a{w_exp.data(), expert_bytes, exp_rb, exp_in, ids.data(), weights.data(), 2, g.data(),
                       nullptr, 0, 0, nullptr, nullptr, y.data(), n, 1};
  moe_down_combine_ref(a, serial_for());
  EXPECT_EQ(y, expert);
  a.down_shexp = w_sh.data(), a.sh_row_bytes = sh_rb, a.sh_in = sh_in, a.sh_g = sg.data(), a.shared_gate_logit = gate_logit.data();
  a.accumulate = true;
  std::fill(y.begin(), y.end(), 7.0f);
  moe_down_combine_ref(a, serial_for());
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(y[i], static_cast<float>(7.0 + (static_cast<double>(expert[i]) + 0.5 * static_cast<double>(shared[i]))));
  }
}

}  // namespace
}  // namespace deltaserve::kernels
