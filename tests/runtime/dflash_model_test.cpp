// The DFlash draft model loader (runtime/dflash_model.h): z-lab's config.json +
// model.safetensors; every malformed or mismatched file is refused with an error that names
// the file and what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/dflash_model.h"
#include "tests/runtime/safetensors_writer.h"

namespace deltaserve::runtime {
namespace {

using testing::HfTensor;

constexpr int64_t kH = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4, kInter = 12;

nlohmann::json good_config() {
  return {{"architectures", {"DFlashDraftModel"}},
          {"hidden_size", kH},
          {"num_hidden_layers", 1},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kKvHeads},
          {"head_dim", kHeadDim},
          {"intermediate_size", kInter},
          {"vocab_size", 32},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"layer_types", {"full_attention"}},
          {"dflash_config", {{"block_size", 16}, {"mask_token_id", 31}, {"target_layer_ids", {0, 2}}}}};
}

std::map<std::string, HfTensor> good_tensors() {
  auto matrix = [](int64_t rows, int64_t cols) {
    HfTensor t;
    t.shape = {rows, cols};
    for (int64_t i = 0; i < rows * cols; ++i) t.values.push_back(static_cast<float>(i % 7) * 0.125f - 0.375f);
    return t;
  };
  auto vector = [](int64_t n) {
    HfTensor t;
    t.shape = {n};
    t.values.assign(static_cast<size_t>(n), 1.0f);
    return t;
  };
  std::map<std::string, HfTensor> t;
  t["fc.weight"] = matrix(kH, 2 * kH);
  t["hidden_norm.weight"] = vector(kH);
  t["norm.weight"] = vector(kH);
  const std::string p = "layers.0.";
  t[p + "input_layernorm.weight"] = vector(kH);
  t[p + "post_attention_layernorm.weight"] = vector(kH);
  t[p + "self_attn.q_proj.weight"] = matrix(kHeads * kHeadDim, kH);
  t[p + "self_attn.k_proj.weight"] = matrix(kKvHeads * kHeadDim, kH);
  t[p + "self_attn.v_proj.weight"] = matrix(kKvHeads * kHeadDim, kH);
  t[p + "self_attn.o_proj.weight"] = matrix(kH, kHeads * kHeadDim);
  t[p + "self_attn.q_norm.weight"] = vector(kHeadDim);
  t[p + "self_attn.k_norm.weight"] = vector(kHeadDim);
  t[p + "mlp.gate_proj.weight"] = matrix(kInter, kH);
  t[p + "mlp.up_proj.weight"] = matrix(kInter, kH);
  t[p + "mlp.down_proj.weight"] = matrix(kH, kInter);
  return t;
}

ModelConfig target() {
  ModelConfig c;
  c.num_embd = kH;
  c.num_layers = 4;
  c.num_vocab = 32;
  return c;
}

class DFlashModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dflash_model_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(const nlohmann::json& config, const std::map<std::string, HfTensor>& tensors) {
    std::ofstream(dir_ / "config.json") << config.dump();
    const testing::Bytes bytes = testing::safetensors_bytes(tensors);
    std::ofstream(dir_ / "model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

  // Loading must throw std::runtime_error whose message holds `what`.
  void expect_refused(const std::string& what) {
    try {
      load_dflash_model(dir_.string(), target());
      ADD_FAILURE() << "loaded; expected an error containing '" << what << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }

  std::filesystem::path dir_;
};

TEST_F(DFlashModelTest, LoadsThePublishedFormat) {
  write(good_config(), good_tensors());
  const DFlashModel m = load_dflash_model(dir_.string(), target());
  EXPECT_EQ(m.config.block_size, 16);
  EXPECT_EQ(m.config.mask_token_id, 31);
  EXPECT_EQ(m.config.target_layer_ids, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(m.config.head_dim, kHeadDim);
  ASSERT_EQ(m.layers.size(), 1u);
  ASSERT_EQ(m.fc.size(), static_cast<size_t>(kH * 2 * kH));
  EXPECT_EQ(m.fc[1], good_tensors()["fc.weight"].values[1]);  // BF16 -> f32 exactly, HF row-major
  EXPECT_EQ(m.layers[0].w_down.size(), static_cast<size_t>(kH * kInter));
}

TEST_F(DFlashModelTest, AcceptsAModelPrefixAndRopeParameters) {
  nlohmann::json config = good_config();
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_theta", 500000.0}};
  std::map<std::string, HfTensor> tensors;
  for (auto& [name, t] : good_tensors()) tensors["model." + name] = t;
  write(config, tensors);
  EXPECT_EQ(load_dflash_model(dir_.string(), target()).config.rope_theta, 500000.0f);
}

TEST_F(DFlashModelTest, RefusesMissingFiles) {
  expect_refused("config.json: cannot open");
  std::ofstream(dir_ / "config.json") << good_config().dump();
  expect_refused("model.safetensors: missing");
}

TEST_F(DFlashModelTest, RefusesBadConfigs) {
  std::ofstream(dir_ / "config.json") << "{ not json";
  expect_refused("not valid JSON");
  auto refused_with = [&](nlohmann::json config, const std::string& what) {
    write(config, good_tensors());
    expect_refused(what);
  };
  nlohmann::json c = good_config();
  c["architectures"] = {"DFlash2DraftModel"};
  refused_with(c, "DFlash2");
  c = good_config();
  c["dflash_config"].erase("target_layer_ids");
  refused_with(c, "'target_layer_ids': missing");
  c = good_config();
  c["dflash_config"]["target_layer_ids"] = {2, 1};
  refused_with(c, "must be increasing");
  c = good_config();
  c["layer_types"] = {"sliding_attention"};
  refused_with(c, "only full_attention");
  c = good_config();
  c["hidden_size"] = 16;
  refused_with(c, "differs from the target's 8");
  c = good_config();
  c["dflash_config"]["target_layer_ids"] = {0, 4};
  refused_with(c, "past the target's 4 layers");
  c = good_config();
  c["dflash_config"]["mask_token_id"] = 32;
  refused_with(c, "outside the target's vocabulary");
  c = good_config();
  c["num_key_value_heads"] = 3;
  refused_with(c, "num_key_value_heads");
}

TEST_F(DFlashModelTest, RefusesTensorsThatDoNotMatchTheConfig) {
  auto tensors = good_tensors();
  tensors.erase("layers.0.mlp.up_proj.weight");
  write(good_config(), tensors);
  expect_refused("tensor 'layers.0.mlp.up_proj.weight' is missing");
  tensors = good_tensors();
  tensors["fc.weight"].shape = {2 * kH, kH};
  write(good_config(), tensors);
  expect_refused("tensor 'fc.weight' has shape [16, 8], config.json implies [8, 16]");
  // A truncated weights file: the safetensors reader's own error, naming the file.
  write(good_config(), good_tensors());
  std::filesystem::resize_file(dir_ / "model.safetensors", 64);
  expect_refused("model.safetensors");
}

}  // namespace
}  // namespace deltaserve::runtime
