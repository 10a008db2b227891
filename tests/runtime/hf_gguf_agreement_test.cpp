// The HF loader's conversion must produce what the fixture converter wrote to GGUF:
// every tensor of tests/fixtures/tiny_{dense,moe}/hf equals the one in model-f32.gguf
// (same name, type, shape and values). Skipped when the fixtures are absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/model_weights.h"

namespace deltaserve::runtime {
namespace {

void expect_same_tensors(const std::string& fixture) {
  const std::string hf_dir = "tests/fixtures/" + fixture + "/hf";
  const std::string gguf_path = "tests/fixtures/" + fixture + "/model-f32.gguf";
  if (!std::filesystem::exists(hf_dir) || !std::filesystem::exists(gguf_path)) {
    GTEST_SKIP() << "fixture " << fixture << " not present";
  }
  const auto hf = load_model(hf_dir);
  const auto gguf = load_model(gguf_path);
  EXPECT_EQ(hf->config.layer_kinds, gguf->config.layer_kinds);
  EXPECT_EQ(hf->config.num_mtp_layers, gguf->config.num_mtp_layers);
  EXPECT_EQ(hf->config.tied_embeddings, gguf->config.tied_embeddings);
  ASSERT_EQ(hf->tensors.size(), gguf->tensors.size());
  for (const auto& [name, g] : gguf->tensors) {
    const auto it = hf->tensors.find(name);
    ASSERT_NE(it, hf->tensors.end()) << name;
    const TensorView& h = it->second;
    EXPECT_EQ(h.ne, g.ne) << name;
    ASSERT_EQ(h.type, g.type) << name;
    ASSERT_EQ(h.num_bytes, g.num_bytes) << name;
    ASSERT_EQ(g.type, kernels::DType::F32) << name;
    float max_diff = 0.0f;
    for (size_t i = 0; i < g.num_bytes / 4; ++i) {
      float a, b;
      std::memcpy(&a, h.data + 4 * i, 4);
      std::memcpy(&b, g.data + 4 * i, 4);
      max_diff = std::max(max_diff, std::fabs(a - b));
    }
    // -exp(A_log) may round differently between numpy and libm; everything else is exact.
    EXPECT_LE(max_diff, name.ends_with("ssm_a") ? 1e-6f : 0.0f) << name;
  }
}

TEST(HfGgufAgreement, TinyDense) { expect_same_tensors("tiny_dense"); }
TEST(HfGgufAgreement, TinyMoe) { expect_same_tensors("tiny_moe"); }

}  // namespace
}  // namespace deltaserve::runtime
