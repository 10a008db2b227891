// The CPU forward pass against transformers' own Qwen3.5 classes (tools/oracle fixtures):
// 64-token prefill in one plan, then 16 single-token decode steps; every weight format.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "tests/model/fixture.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::argmax;
using deltaserve::testing::read_f32;
using deltaserve::testing::read_reference;
using deltaserve::testing::relative_max_diff;

struct FormatCase {
  std::string fixture;
  std::string model_file;      // relative to the fixture folder ("hf" = the HF directory)
  std::string reference_file;  // logits to compare with
  double tolerance;            // on max|diff| / max|ref|
};

void PrintTo(const FormatCase& c, std::ostream* os) { *os << c.fixture << "/" << c.model_file; }

std::string case_name(const ::testing::TestParamInfo<FormatCase>& info) {
  std::string name = info.param.fixture + "_" + info.param.model_file;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

std::vector<int32_t> block_table(int32_t first_block, int32_t num_blocks) {
  std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
  std::iota(blocks.begin(), blocks.end(), first_block);
  return blocks;
}

class ForwardVsTransformers : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ForwardVsTransformers, PrefillThenDecode) {
  const FormatCase& p = GetParam();
  const nlohmann::json ref = read_reference(p.fixture);
  const std::string path = (deltaserve::testing::fixture_dir(p.fixture) / p.model_file).string();
  ASSERT_TRUE(std::filesystem::exists(path)) << "fixture not generated: " << path;
  std::unique_ptr<LoadedModel> model = load_model(path);
  CpuBackend backend(*model, CacheConfig{4, 16, 32}, 2);

  const std::vector<int32_t> tokens = ref.at("tokens").get<std::vector<int32_t>>();
  const int32_t prefill = ref.at("prefill_tokens").get<int32_t>();
  const int64_t vocab = ref.at("num_vocab").get<int64_t>();
  ASSERT_EQ(vocab, model->config.num_vocab);
  const std::vector<float> expected = read_f32(p.fixture, p.reference_file);
  ASSERT_EQ(expected.size(), tokens.size() * static_cast<size_t>(vocab));

  SequenceStep step;
  step.slot = 1;
  step.num_cached_tokens = 0;
  step.tokens.assign(tokens.begin(), tokens.begin() + prefill);
  step.kv_blocks = block_table(3, 8);
  step.num_logits = prefill;
  ForwardOutput out;
  backend.forward(BatchPlan{{step}}, out);
  ASSERT_EQ(out.num_rows, prefill);
  for (int32_t t = 0; t < prefill; ++t) {
    const float* want = expected.data() + t * vocab;
    EXPECT_LE(relative_max_diff(out.row_logits(t), want, static_cast<size_t>(vocab)), p.tolerance) << "prefill row " << t;
    EXPECT_EQ(argmax(out.row_logits(t), vocab), argmax(want, vocab)) << "prefill row " << t;
  }
  for (size_t t = static_cast<size_t>(prefill); t < tokens.size(); ++t) {
    step.num_cached_tokens = static_cast<int32_t>(t);
    step.tokens = {tokens[t]};
    step.num_logits = 1;
    backend.forward(BatchPlan{{step}}, out);
    const float* want = expected.data() + static_cast<int64_t>(t) * vocab;
    EXPECT_LE(relative_max_diff(out.row_logits(0), want, static_cast<size_t>(vocab)), p.tolerance) << "decode row " << t;
    EXPECT_EQ(argmax(out.row_logits(0), vocab), argmax(want, vocab)) << "decode row " << t;
  }
}

// The MTP head over the prefill: row t = (post-norm hidden at t, token t+1), causal.
TEST_P(ForwardVsTransformers, MtpHead) {
  const FormatCase& p = GetParam();
  const std::string mtp_file = "mtp_" + p.reference_file;
  const std::string path = (deltaserve::testing::fixture_dir(p.fixture) / p.model_file).string();
  if (!std::filesystem::exists(path) || !deltaserve::testing::fixture_file_exists(p.fixture, mtp_file))
    GTEST_SKIP() << "no MTP reference " << mtp_file;
  const nlohmann::json ref = read_reference(p.fixture);
  std::unique_ptr<LoadedModel> model = load_model(path);
  ASSERT_TRUE(model->weights.has_mtp);
  CpuBackend backend(*model, CacheConfig{2, 16, 16}, 2);
  const std::vector<int32_t> tokens = ref.at("tokens").get<std::vector<int32_t>>();
  const int32_t prefill = ref.at("prefill_tokens").get<int32_t>();
  const int64_t vocab = model->config.num_vocab;

  SequenceStep step;
  step.tokens.assign(tokens.begin(), tokens.begin() + prefill);
  step.kv_blocks = block_table(0, 4);
  step.num_logits = prefill;
  ForwardOutput trunk;
  backend.forward(BatchPlan{{step}}, trunk);

  MtpSequenceStep mtp;
  mtp.tokens.assign(tokens.begin() + 1, tokens.begin() + prefill);
  mtp.hidden.assign(trunk.hidden.begin(), trunk.hidden.end() - model->config.num_embd);
  mtp.kv_blocks = block_table(8, 4);
  mtp.num_logits = prefill - 1;
  ForwardOutput out;
  backend.forward_mtp(MtpPlan{{mtp}}, out);
  const std::vector<float> expected = read_f32(p.fixture, mtp_file);
  ASSERT_EQ(expected.size(), static_cast<size_t>((prefill - 1) * vocab));
  for (int32_t t = 0; t < prefill - 1; ++t) {
    const float* want = expected.data() + t * vocab;
    EXPECT_LE(relative_max_diff(out.row_logits(t), want, static_cast<size_t>(vocab)), p.tolerance) << "MTP row " << t;
    EXPECT_EQ(argmax(out.row_logits(t), vocab), argmax(want, vocab)) << "MTP row " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ForwardVsTransformers,
    ::testing::Values(FormatCase{"tiny_dense", "model-f32.gguf", "logits.f32", 1e-4},
                      FormatCase{"tiny_dense", "hf", "logits.f32", 1e-4},
                      FormatCase{"tiny_dense", "model-bf16.gguf", "logits_bf16.f32", 1e-4},
                      FormatCase{"tiny_dense", "model-q8_0.gguf", "logits_q8_0.f32", 1e-4},
                      FormatCase{"tiny_dense", "model-q4_0.gguf", "logits_q4_0.f32", 1e-4},
                      FormatCase{"tiny_moe", "model-f32.gguf", "logits.f32", 1e-4},
                      FormatCase{"tiny_moe", "hf", "logits.f32", 1e-4},
                      FormatCase{"tiny_moe", "model-bf16.gguf", "logits_bf16.f32", 1e-4},
                      FormatCase{"tiny_moe", "model-q8_0.gguf", "logits_q8_0.f32", 1e-4},
                      FormatCase{"tiny_moe", "model-q4_0.gguf", "logits_q4_0.f32", 1e-4}),
    case_name);

}  // namespace
}  // namespace deltaserve::runtime
