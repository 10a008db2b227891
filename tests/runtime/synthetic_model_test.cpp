// Synthetic weights: every type builds and runs through the CPU backend without NaN, the
// bytes depend on the seed only (not on the thread count), decoded values have the
// intended scale, and the full-size layouts have MODEL.md's byte counts (never allocated).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_preset.h"
#include "runtime/synthetic_fill.h"
#include "runtime/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using kernels::DType;

// Prefill 12 tokens, then 2 decode steps; returns the logits of every step's last row.
std::vector<float> run_tokens(const LoadedModel& model) {
  CpuBackend backend(model, CacheConfig{1, 16, 4}, 2);
  SequenceStep step;
  for (int32_t i = 0; i < 12; ++i) step.tokens.push_back((i * 37 + 5) % static_cast<int32_t>(model.config.num_vocab));
  step.kv_blocks = {0, 1, 2, 3};
  ForwardOutput out;
  std::vector<float> logits;
  for (int s = 0; s < 3; ++s) {
    backend.forward(BatchPlan{{step}}, out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    step.num_cached_tokens += static_cast<int32_t>(step.tokens.size());
    step.tokens = {(s * 11 + 3) % static_cast<int32_t>(model.config.num_vocab)};
  }
  return logits;
}

void expect_sane(const std::vector<float>& logits, const std::string& what) {
  ASSERT_FALSE(logits.empty()) << what;
  double sum_sq = 0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v)) << what;
    sum_sq += static_cast<double>(v) * v;
  }
  const double rms = std::sqrt(sum_sq / static_cast<double>(logits.size()));
  EXPECT_GT(rms, 0.05) << what;  // not collapsed
  EXPECT_LT(rms, 50.0) << what;  // not exploding
}

class EveryWeightType : public ::testing::TestWithParam<DType> {};

TEST_P(EveryWeightType, TinyMoeAndDenseRunWithoutNan) {
  for (const char* preset : {"tiny-moe", "tiny-dense"}) {
    const ModelConfig config = find_preset(preset).config;
    const std::unique_ptr<LoadedModel> model = make_synthetic_model(config, GetParam(), 7, 2);
    EXPECT_TRUE(model->weights.has_mtp);
    EXPECT_EQ(model->format, "synthetic");
    expect_sane(run_tokens(*model), std::string(preset) + " " + std::string(kernels::dtype_name(GetParam())));
  }
}

// The decoded RMS of a matrix is close to 1/sqrt(in) whatever the type.
TEST_P(EveryWeightType, DecodedScale) {
  const ModelConfig config = find_preset("tiny-moe").config;
  const std::unique_ptr<LoadedModel> model = make_synthetic_model(config, GetParam(), 3, 2);
  const TensorView& w = model->weights.layers[0].gdn.qkv;  // {256, Dc}
  std::vector<float> row(static_cast<size_t>(w.ne[0]));
  double sum = 0, sum_sq = 0;
  for (int64_t r = 0; r < w.num_rows(); ++r) {
    kernels::dequantize_row(w.type, w.row(r), row.data(), w.ne[0]);
    for (float v : row) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
  }
  const double n = static_cast<double>(w.num_elements());
  const double target = 1.0 / std::sqrt(static_cast<double>(w.ne[0]));
  EXPECT_NEAR(std::sqrt(sum_sq / n), target, 0.1 * target);
  EXPECT_LT(std::abs(sum / n), 0.05 * target);
}

INSTANTIATE_TEST_SUITE_P(Synthetic, EveryWeightType,
                         ::testing::ValuesIn(synthetic_weight_types()),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(kernels::dtype_name(info.param)); });

bool same_bytes(const LoadedModel& a, const LoadedModel& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    const TensorView& u = b.tensors.at(name);
    if (t.num_bytes != u.num_bytes || std::memcmp(t.data, u.data, t.num_bytes) != 0) return false;
  }
  return true;
}

TEST(SyntheticModel, SeedDecidesTheBytesNotTheThreads) {
  const ModelConfig config = find_preset("tiny-moe").config;
  const auto one = make_synthetic_model(config, DType::Q4_K, 11, 1);
  const auto three = make_synthetic_model(config, DType::Q4_K, 11, 3);
  EXPECT_TRUE(same_bytes(*one, *three));
  const auto other = make_synthetic_model(config, DType::Q4_K, 12, 3);
  EXPECT_FALSE(same_bytes(*one, *other));
}

TEST(SyntheticModel, SameSeedSameLogitsOtherSeedOtherLogits) {
  const ModelConfig config = find_preset("tiny-moe").config;
  const std::vector<float> a = run_tokens(*make_synthetic_model(config, DType::Q8_0, 1, 2));
  const std::vector<float> b = run_tokens(*make_synthetic_model(config, DType::Q8_0, 1, 1));
  const std::vector<float> c = run_tokens(*make_synthetic_model(config, DType::Q8_0, 2, 2));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// 64 layers of tiny shapes: the residual stream stays finite and the logits are spread.
TEST(SyntheticModel, DeepModelStaysSane) {
  ModelConfig config = find_preset("tiny-moe").config;
  config.num_layers = 64;
  config.layer_kinds = layer_kinds_from_interval(64, 4);
  expect_sane(run_tokens(*make_synthetic_model(config, DType::BF16, 5, 2)), "64 layers");
}

TEST(SyntheticModel, KQuantRowsTooShortFallBack) {
  EXPECT_EQ(synthetic_matrix_type(DType::Q4_K, 512), DType::Q4_K);
  EXPECT_EQ(synthetic_matrix_type(DType::Q4_K, 64), DType::Q8_0);
  EXPECT_EQ(synthetic_matrix_type(DType::Q6_K, 48), DType::F16);
  EXPECT_EQ(synthetic_matrix_type(DType::Q4_0, 64), DType::Q4_0);
  const auto model = make_synthetic_model(find_preset("tiny-moe").config, DType::Q6_K, 1, 2);
  EXPECT_EQ(model->weights.layers[0].ffn.down_exps.type, DType::Q8_0);  // rows of Ie = 64
  EXPECT_EQ(model->weights.layers[0].gdn.qkv.type, DType::Q6_K);        // rows of H = 256
  EXPECT_EQ(model->weights.layers[0].attn_norm.type, DType::F32);
  EXPECT_EQ(model->weights.layers[0].ffn.router.type, DType::F32);
}

TEST(SyntheticModel, WeightTypeNames) {
  EXPECT_EQ(parse_synthetic_weight_type("q4_0"), DType::Q4_0);
  EXPECT_EQ(parse_synthetic_weight_type("Q4_K"), DType::Q4_K);
  EXPECT_EQ(parse_synthetic_weight_type("bf16"), DType::BF16);
  EXPECT_EQ(parse_synthetic_weight_type("q5_k"), DType::Q5_K);
  try {
    parse_synthetic_weight_type("q3_k");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown weight type 'q3_k'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q5_k, q6_k"), std::string::npos) << e.what();
  }
  ModelConfig broken = find_preset("tiny-moe").config;
  broken.num_embd = 0;
  EXPECT_THROW(make_synthetic_model(broken, DType::F32, 1, 1), std::invalid_argument);
}

TEST(SyntheticModel, FullSizeByteCounts) {
  // MODEL.md 6.4: 35B-A3B trunk 19.5 GB at Q4_0 + MTP 0.48 GB + F32 router and small tensors.
  const double moe_q4 = static_cast<double>(synthetic_model_bytes(find_preset("qwen3.6-35b-a3b").config, DType::Q4_0));
  EXPECT_GT(moe_q4, 19.0e9);
  EXPECT_LT(moe_q4, 21.0e9);
  const double moe_q8 = static_cast<double>(synthetic_model_bytes(find_preset("qwen3.6-35b-a3b").config, DType::Q8_0));
  EXPECT_GT(moe_q8, 37.0e9);
  EXPECT_LT(moe_q8, 39.0e9);
  // 27B: 15.1 GB Q4_0 trunk + 0.24 GB MTP.
  const double dense_q4 = static_cast<double>(synthetic_model_bytes(find_preset("qwen3.6-27b").config, DType::Q4_0));
  EXPECT_GT(dense_q4, 15.0e9);
  EXPECT_LT(dense_q4, 15.6e9);
}

TEST(SyntheticFill, KQuantScalePackingRoundTrips) {
  const int scale[8] = {16, 31, 0, 63, 17, 45, 62, 1}, min[8] = {15, 29, 63, 0, 33, 8, 50, 2};
  uint8_t packed[12];
  synthetic::pack_scale_min_k4(scale, min, packed);
  for (int s = 0; s < 8; ++s) {
    int sc = -1, m = -1;
    kernels::scale_min_k4(s, packed, sc, m);
    EXPECT_EQ(sc, scale[s]) << s;
    EXPECT_EQ(m, min[s]) << s;
  }
}

}  // namespace
}  // namespace deltaserve::runtime
