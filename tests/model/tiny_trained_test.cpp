// The embedded default model (models/deltaserve-tiny-moe.gguf, Q8_0) on the CPU backend
// against transformers on held-out text (tests/fixtures/tiny_trained, written by
// tools/train_tiny/make_fixture.py from the GGUF's own dequantised weights): 64-token
// prefill, then 16 single-token decode steps. Also: the GGUF's tokenizer gives the
// fixture's tokens for its text, and transformers' ids for every tokenizer case.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/model/fixture.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::argmax;
using deltaserve::testing::fixture_dir;
using deltaserve::testing::read_f32;
using deltaserve::testing::read_reference;
using deltaserve::testing::relative_max_diff;

constexpr const char* kFixture = "tiny_trained";
constexpr double kTolerance = 1e-4;  // max|diff| / max|ref|, float32 compute on Q8_0 weights

class TinyTrained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ref_ = new nlohmann::json(read_reference(kFixture));
    model_ = load_model(ref_->at("gguf").get<std::string>()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ref_;
  }
  static nlohmann::json* ref_;
  static LoadedModel* model_;
};
nlohmann::json* TinyTrained::ref_ = nullptr;
LoadedModel* TinyTrained::model_ = nullptr;

TEST_F(TinyTrained, ConfigMatchesFixture) {
  EXPECT_EQ(model_->config.num_vocab, ref_->at("num_vocab").get<int64_t>());
  EXPECT_EQ(model_->config.num_embd, ref_->at("hidden_size").get<int64_t>());
  EXPECT_TRUE(model_->weights.has_mtp);
  EXPECT_FALSE(model_->chat_template.empty());
}

TEST_F(TinyTrained, PrefillThenDecodeMatchesTransformers) {
  CpuBackend backend(*model_, CacheConfig{4, 16, 32}, 2);
  const std::vector<int32_t> tokens = ref_->at("tokens").get<std::vector<int32_t>>();
  const int32_t prefill = ref_->at("prefill_tokens").get<int32_t>();
  const int64_t vocab = model_->config.num_vocab;
  const std::vector<float> expected = read_f32(kFixture, "logits.f32");
  ASSERT_EQ(expected.size(), tokens.size() * static_cast<size_t>(vocab));

  SequenceStep step;
  step.slot = 1;
  step.num_cached_tokens = 0;
  step.tokens.assign(tokens.begin(), tokens.begin() + prefill);
  step.kv_blocks.resize(8);
  std::iota(step.kv_blocks.begin(), step.kv_blocks.end(), 3);
  step.num_logits = prefill;
  ForwardOutput out;
  backend.forward(BatchPlan{{step}}, out);
  ASSERT_EQ(out.num_rows, prefill);
  for (int32_t t = 0; t < prefill; ++t) {
    const float* want = expected.data() + t * vocab;
    EXPECT_LE(relative_max_diff(out.row_logits(t), want, static_cast<size_t>(vocab)), kTolerance) << "prefill row " << t;
    EXPECT_EQ(argmax(out.row_logits(t), vocab), argmax(want, vocab)) << "prefill row " << t;
  }
  for (size_t t = static_cast<size_t>(prefill); t < tokens.size(); ++t) {
    step.num_cached_tokens = static_cast<int32_t>(t);
    step.tokens = {tokens[t]};
    step.num_logits = 1;
    backend.forward(BatchPlan{{step}}, out);
    const float* want = expected.data() + static_cast<int64_t>(t) * vocab;
    EXPECT_LE(relative_max_diff(out.row_logits(0), want, static_cast<size_t>(vocab)), kTolerance) << "decode row " << t;
    EXPECT_EQ(argmax(out.row_logits(0), vocab), argmax(want, vocab)) << "decode row " << t;
  }
}

TEST_F(TinyTrained, GgufTokenizerGivesFixtureTokens) {
  ASSERT_NE(model_->gguf, nullptr);
  const auto tok = Tokenizer::from_gguf(*model_->gguf);
  const std::vector<int32_t> ids = tok->encode(ref_->at("text").get<std::string>());
  const std::vector<int32_t> tokens = ref_->at("tokens").get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), tokens.size());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(tokens.size())), tokens);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), ref_->at("text_num_tokens").get<int64_t>());
}

TEST_F(TinyTrained, GgufTokenizerMatchesTransformersCases) {
  std::ifstream in(fixture_dir(kFixture) / "tokenizer_cases.json");
  ASSERT_TRUE(in) << "missing tokenizer_cases.json";
  const nlohmann::json cases = nlohmann::json::parse(in).at("cases");
  const auto tok = Tokenizer::from_gguf(*model_->gguf);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(tok->encode(text), c.at("ids").get<std::vector<int32_t>>()) << "text: " << text.substr(0, 80);
  }
}

}  // namespace
}  // namespace deltaserve::runtime
