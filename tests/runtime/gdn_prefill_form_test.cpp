// CacheConfig::gdn_prefill on the CPU backend (tiny-moe fixture, 6 GDN layers): the names
// parse both ways; auto is the recurrent form bit for bit (so the greedy-identity tests keep
// their bits); chunked prefill agrees with recurrent to f32 rounding but not bitwise (it is
// really another form), and its chunks follow absolute positions: a prompt cut on a multiple
// of 64 gives the same bits as the uncut prompt, and decode rows after it stay recurrent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {
namespace {

TEST(GdnPrefillForm, NamesRoundTrip) {
  for (GdnPrefill m : {GdnPrefill::kAuto, GdnPrefill::kRecurrent, GdnPrefill::kChunked})
    EXPECT_EQ(parse_gdn_prefill(gdn_prefill_name(m)), m);
  for (const char* bad : {"", "wy", "Chunked", "recurrent "}) EXPECT_FALSE(parse_gdn_prefill(bad).has_value()) << bad;
  EXPECT_EQ(CacheConfig{}.gdn_prefill, GdnPrefill::kAuto);
}

class GdnPrefillCpuTest : public ::testing::Test {
 protected:
  static constexpr int32_t kPrompt = 150;  // three chunks, the last one cut

  void SetUp() override { model_ = load_model("tests/fixtures/tiny_moe/model-f32.gguf"); }

  // The prompt in steps of `cuts` rows (the rest in the last), then one decode row; the logits
  // of the prompt's last row and of the decode row.
  std::vector<float> run(GdnPrefill form, const std::vector<int32_t>& cuts) const {
    CacheConfig cache{1, 16, 16};
    cache.gdn_prefill = form;
    CpuBackend backend(*model_, cache, 2);
    std::vector<int32_t> blocks(16);
    for (int32_t b = 0; b < 16; ++b) blocks[static_cast<size_t>(b)] = b;
    std::vector<float> logits;
    int32_t done = 0;
    std::vector<int32_t> ends = cuts;
    ends.push_back(kPrompt);
    ends.push_back(kPrompt + 1);  // the decode row
    for (int32_t end : ends) {
      SequenceStep s;
      s.num_cached_tokens = done;
      for (int32_t t = done; t < end; ++t) s.tokens.push_back((t * 37 + 11) % 97);
      s.kv_blocks = blocks;
      s.num_logits = end >= kPrompt ? 1 : 0;
      BatchPlan plan{{s}};
      ForwardOutput out;
      backend.forward(plan, out);
      if (s.num_logits > 0) logits.insert(logits.end(), out.logits.begin(), out.logits.end());
      done = end;
    }
    return logits;
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_F(GdnPrefillCpuTest, AutoIsRecurrentAndChunkedAgreesToRounding) {
  const std::vector<float> recurrent = run(GdnPrefill::kRecurrent, {});
  EXPECT_EQ(run(GdnPrefill::kAuto, {}), recurrent);
  const std::vector<float> chunked = run(GdnPrefill::kChunked, {});
  ASSERT_EQ(chunked.size(), recurrent.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < chunked.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(chunked[i]) - recurrent[i]));
    scale = std::max(scale, std::abs(static_cast<double>(recurrent[i])));
  }
  EXPECT_LT(diff, 1e-4 * scale);  // the kernel's own tolerance (tests/kernels/gdn_chunked_test.cpp)
  EXPECT_NE(chunked, recurrent);  // the chunked form really ran
  // The recurrent form's bits do not depend on cuts at all.
  EXPECT_EQ(run(GdnPrefill::kRecurrent, {37, 100}), recurrent);
}

TEST_F(GdnPrefillCpuTest, ChunkedCutsOnMultiplesOf64ChangeNoBit) {
  const std::vector<float> whole = run(GdnPrefill::kChunked, {});
  EXPECT_EQ(run(GdnPrefill::kChunked, {64}), whole);
  EXPECT_EQ(run(GdnPrefill::kChunked, {64, 128}), whole);
}

}  // namespace
}  // namespace deltaserve::runtime
