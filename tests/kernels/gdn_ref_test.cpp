// gdn_ref (the GDN layer core at one GPU launch's granularity, kernels/gdn/gdn.h) on fresh
// random inputs: its pool indexing against gdn_rows_ref run per sequence (initial entries,
// final states in place / to another entry / not written, ring snapshots equal to the state
// after each row), and the bf16-held delta state left bf16-representable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/gdn/gdn.h"
#include "kernels/quant.h"

namespace deltaserve::kernels {
namespace {

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

struct Launch {
  GdnShape sh{2, 4, 16, 8};
  std::vector<int32_t> begin{0, 3, 4, 9};  // three sequences of 3, 1 and 5 rows
  std::vector<float> qkv, alpha, b, conv_w, ssm_a, dt_bias, delta0, conv0;
  int64_t delta_entry = sh.hv * sh.dk * sh.dv, conv_entry = kGdnConvHistory * sh.dc();

  explicit Launch(unsigned seed, int64_t entries) {
    std::mt19937 rng(seed);
    const auto rows = static_cast<size_t>(begin.back());
    qkv = random_floats(rng, rows * static_cast<size_t>(sh.dc()), 1.0f);
    alpha = random_floats(rng, rows * static_cast<size_t>(sh.hv), 1.0f);
    b = random_floats(rng, alpha.size(), 1.0f);
    conv_w = random_floats(rng, static_cast<size_t>(sh.dc() * kGdnConvKernel), 0.5f);
    ssm_a = random_floats(rng, static_cast<size_t>(sh.hv), 1.0f);
    for (float& a : ssm_a) a = -std::abs(a) - 0.1f;
    dt_bias = random_floats(rng, static_cast<size_t>(sh.hv), 0.5f);
    delta0 = random_floats(rng, static_cast<size_t>(delta_entry * entries), 0.5f);
    conv0 = random_floats(rng, static_cast<size_t>(conv_entry * entries), 0.5f);
  }
  GdnRefInputs inputs() const { return {sh, qkv.data(), alpha.data(), b.data(), conv_w.data(), ssm_a.data(), dt_bias.data()}; }
};

TEST(GdnRef, PoolIndexingMatchesRowsPerSequence) {
  const Launch l(7, 12);
  // Sequence 0 in place from entry 1 (ring at 4); 1 from 2 to 3; 2 from 0, not written (ring at 7).
  const std::vector<int32_t> state_in{1, 2, 0}, state_out{1, 3, -1}, ring_first{4, -1, 7};
  const GdnRefPools ref = gdn_ref(l.inputs(), l.begin, state_in, state_out, ring_first, l.delta0, l.conv0);
  std::vector<bool> written(12, false);
  for (size_t s = 0; s < state_in.size(); ++s) {
    const int64_t r0 = l.begin[s], t = l.begin[s + 1] - r0;
    std::vector<float> conv(l.conv0.begin() + l.conv_entry * state_in[s], l.conv0.begin() + l.conv_entry * (state_in[s] + 1));
    std::vector<float> delta(l.delta0.begin() + l.delta_entry * state_in[s],
                             l.delta0.begin() + l.delta_entry * (state_in[s] + 1));
    std::vector<float> out(static_cast<size_t>(t * l.sh.hv * l.sh.dv));
    std::vector<float> conv_rows(static_cast<size_t>(t * l.conv_entry)), delta_rows(static_cast<size_t>(t * l.delta_entry));
    gdn_rows_ref(l.inputs(), r0, t, conv.data(), delta.data(), out.data(), GdnRefDeltaState::kF32, conv_rows.data(),
                 delta_rows.data());
    EXPECT_TRUE(same_bits(out.data(), ref.out.data() + r0 * l.sh.hv * l.sh.dv, out.size())) << "sequence " << s;
    // The last row's snapshot is the final state.
    EXPECT_TRUE(same_bits(delta.data(), delta_rows.data() + (t - 1) * l.delta_entry, delta.size()));
    if (ring_first[s] >= 0) {
      EXPECT_TRUE(same_bits(delta_rows.data(), ref.delta.data() + l.delta_entry * ring_first[s], delta_rows.size()));
      EXPECT_TRUE(same_bits(conv_rows.data(), ref.conv.data() + l.conv_entry * ring_first[s], conv_rows.size()));
      for (int64_t i = 0; i < t; ++i) written[static_cast<size_t>(ring_first[s] + i)] = true;
    }
    if (state_out[s] >= 0) {
      EXPECT_TRUE(same_bits(delta.data(), ref.delta.data() + l.delta_entry * state_out[s], delta.size()));
      EXPECT_TRUE(same_bits(conv.data(), ref.conv.data() + l.conv_entry * state_out[s], conv.size()));
      written[static_cast<size_t>(state_out[s])] = true;
    }
  }
  for (int64_t e = 0; e < 12; ++e) {
    if (written[static_cast<size_t>(e)]) continue;
    EXPECT_TRUE(same_bits(l.delta0.data() + l.delta_entry * e, ref.delta.data() + l.delta_entry * e,
                          static_cast<size_t>(l.delta_entry)))
        << "entry " << e << " written by no sequence changed";
  }
}

TEST(GdnRef, Bf16HeldStateStaysBf16) {
  const Launch l(11, 3);
  const GdnRefPools ref = gdn_ref(l.inputs(), l.begin, {0, 1, 2}, {0, 1, 2}, {}, l.delta0, l.conv0,
                                  GdnRefDeltaState::kBf16AfterEachRow);
  std::vector<uint16_t> bits(ref.delta.size());
  std::vector<float> back(ref.delta.size());
  quantize_row(DType::BF16, ref.delta.data(), bits.data(), static_cast<int64_t>(bits.size()));
  dequantize_row(DType::BF16, bits.data(), back.data(), static_cast<int64_t>(back.size()));
  EXPECT_TRUE(same_bits(back.data(), ref.delta.data(), back.size()));
  // And it differs from the f32-held chain (the rounding sits between rows).
  const GdnRefPools f32 = gdn_ref(l.inputs(), l.begin, {0, 1, 2}, {0, 1, 2}, {}, l.delta0, l.conv0);
  EXPECT_FALSE(same_bits(f32.delta.data(), ref.delta.data(), ref.delta.size()));
}

}  // namespace
}  // namespace deltaserve::kernels
