// Built-in presets: every file parses and validates, the real models have MODEL.md's shapes
// (1.2, 1.3) and parameter counts (6.1), lookups by alias, clear errors otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "runtime/model_preset.h"
#include "runtime/model_weights.h"
#include "runtime/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using kernels::DType;

// Elements of every tensor: the F32 layout's bytes / 4, less the per-tensor alignment
// padding (under 256 bytes per tensor).
int64_t approx_num_params(const ModelConfig& c) { return synthetic_model_bytes(c, DType::F32) / 4; }

TEST(ModelPreset, EveryBuiltinPresetValidates) {
  const std::vector<ModelPreset> presets = builtin_presets();
  std::set<std::string> names;
  for (const ModelPreset& p : presets) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate preset " << p.name;
    for (const std::string& a : p.aliases) EXPECT_TRUE(names.insert(a).second) << "duplicate alias " << a;
    EXPECT_EQ(p.config.name, p.name);
    EXPECT_FALSE(p.description.empty()) << p.name;
  }
  for (const char* wanted : {"qwen3.6-35b-a3b", "qwen3.6-27b", "qwen3.5-9b", "qwen3.5-4b", "qwen3.5-2b",
                             "qwen3.5-0.8b", "mini-35b-a3b", "tiny-moe", "tiny-dense"}) {
    EXPECT_EQ(names.count(wanted), 1u) << wanted;
  }
}

TEST(ModelPreset, Qwen35bA3bShapes) {
  const ModelConfig c = find_preset("qwen3.6-35b-a3b").config;
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_vocab, 248320);
  EXPECT_EQ(c.num_embd, 2048);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.num_gdn_layers(), 30);
  EXPECT_EQ(c.num_attention_layers(), 10);
  EXPECT_EQ(c.layer_kinds[3], LayerKind::Attention);
  EXPECT_EQ(c.layer_kinds[39], LayerKind::Attention);
  EXPECT_EQ(c.layer_kinds[38], LayerKind::GatedDeltaNet);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rope_dims, 64);
  EXPECT_FLOAT_EQ(c.rope_base, 1e7f);
  EXPECT_EQ(c.ssm_k_heads, 16);
  EXPECT_EQ(c.ssm_v_heads, 32);
  EXPECT_EQ(c.ssm_head_dim, 128);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_EQ(c.conv_channels(), 8192);
  EXPECT_EQ(c.ssm_value_dim(), 4096);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_used, 8);
  EXPECT_EQ(c.expert_ffn_dim, 512);
  EXPECT_EQ(c.shared_ffn_dim, 512);
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.context_length, 262144);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  // MODEL.md 6.1: trunk + MTP = 35,505,251,456 elements.
  EXPECT_NEAR(static_cast<double>(approx_num_params(c)), 35505251456.0, 2e5);
}

TEST(ModelPreset, Qwen27bShapes) {
  const ModelConfig c = find_preset("qwen3.6-27b").config;
  EXPECT_FALSE(c.is_moe());
  EXPECT_EQ(c.num_vocab, 248320);
  EXPECT_EQ(c.num_embd, 5120);
  EXPECT_EQ(c.num_layers, 64);
  EXPECT_EQ(c.num_gdn_layers(), 48);
  EXPECT_EQ(c.num_attention_layers(), 16);
  EXPECT_EQ(c.num_heads, 24);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rope_dims, 64);
  EXPECT_EQ(c.ssm_k_heads, 16);
  EXPECT_EQ(c.ssm_v_heads, 48);
  EXPECT_EQ(c.conv_channels(), 10240);
  EXPECT_EQ(c.ssm_value_dim(), 6144);
  EXPECT_EQ(c.ffn_dim, 17408);
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_FALSE(c.tied_embeddings);
  // MODEL.md 6.1: trunk + MTP = 27,320,697,856 elements.
  EXPECT_NEAR(static_cast<double>(approx_num_params(c)), 27320697856.0, 2e5);
}

TEST(ModelPreset, SmallerDenseSizes) {
  struct Want { const char* name; int64_t hidden, layers, heads, kv_heads, v_heads, ffn; bool tied; };
  for (const Want& w : {Want{"qwen3.5-9b", 4096, 32, 16, 4, 32, 12288, false},
                        Want{"qwen3.5-4b", 2560, 32, 16, 4, 32, 9216, true},
                        Want{"qwen3.5-2b", 2048, 24, 8, 2, 16, 6144, true},
                        Want{"qwen3.5-0.8b", 1024, 24, 8, 2, 16, 3584, true}}) {
    const ModelConfig c = find_preset(w.name).config;
    EXPECT_EQ(c.num_embd, w.hidden) << w.name;
    EXPECT_EQ(c.num_layers, w.layers) << w.name;
    EXPECT_EQ(c.num_heads, w.heads) << w.name;
    EXPECT_EQ(c.num_kv_heads, w.kv_heads) << w.name;
    EXPECT_EQ(c.ssm_v_heads, w.v_heads) << w.name;
    EXPECT_EQ(c.ffn_dim, w.ffn) << w.name;
    EXPECT_EQ(c.tied_embeddings, w.tied) << w.name;
  }
}

TEST(ModelPreset, AliasesAndCase) {
  EXPECT_EQ(find_preset("Qwen3.5-35B-A3B").name, "qwen3.6-35b-a3b");
  EXPECT_EQ(find_preset("qwen3.5-27b").name, "qwen3.6-27b");
  EXPECT_EQ(find_preset("mini").name, "mini-35b-a3b");
}

TEST(ModelPreset, MiniKeepsTheRealLayerShapes) {
  const ModelConfig mini = find_preset("mini").config, full = find_preset("qwen3.6-35b-a3b").config;
  EXPECT_LT(mini.num_layers, full.num_layers);
  EXPECT_LT(mini.num_experts, full.num_experts);
  EXPECT_EQ(mini.num_attention_layers(), 2);
  EXPECT_EQ(mini.num_embd, full.num_embd);
  EXPECT_EQ(mini.conv_channels(), full.conv_channels());
  EXPECT_EQ(mini.head_dim, full.head_dim);
  EXPECT_EQ(mini.expert_ffn_dim, full.expert_ffn_dim);
  EXPECT_EQ(mini.num_experts_used, full.num_experts_used);
  EXPECT_EQ(mini.num_vocab, full.num_vocab);
}

TEST(ModelPreset, TinyMoeMatchesTheEmbeddedModel) {
  const ModelConfig p = find_preset("tiny-moe").config;
  const std::unique_ptr<LoadedModel> model = load_model("models/deltaserve-tiny-moe.gguf");
  const ModelConfig& m = model->config;
  EXPECT_EQ(p.arch, m.arch);
  EXPECT_EQ(p.num_vocab, m.num_vocab);
  EXPECT_EQ(p.num_embd, m.num_embd);
  EXPECT_EQ(p.num_layers, m.num_layers);
  EXPECT_EQ(p.layer_kinds, m.layer_kinds);
  EXPECT_EQ(p.num_mtp_layers, m.num_mtp_layers);
  EXPECT_EQ(p.num_heads, m.num_heads);
  EXPECT_EQ(p.num_kv_heads, m.num_kv_heads);
  EXPECT_EQ(p.head_dim, m.head_dim);
  EXPECT_EQ(p.rope_dims, m.rope_dims);
  EXPECT_EQ(p.ssm_k_heads, m.ssm_k_heads);
  EXPECT_EQ(p.ssm_v_heads, m.ssm_v_heads);
  EXPECT_EQ(p.ssm_head_dim, m.ssm_head_dim);
  EXPECT_EQ(p.num_experts, m.num_experts);
  EXPECT_EQ(p.num_experts_used, m.num_experts_used);
  EXPECT_EQ(p.expert_ffn_dim, m.expert_ffn_dim);
  EXPECT_EQ(p.shared_ffn_dim, m.shared_ffn_dim);
  EXPECT_EQ(p.tied_embeddings, m.tied_embeddings);
  EXPECT_EQ(p.context_length, m.context_length);
}

TEST(ModelPreset, UnknownNameListsTheBuiltins) {
  try {
    find_preset("qwen9-1t");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown model preset 'qwen9-1t'"), std::string::npos) << what;
    EXPECT_NE(what.find("qwen3.6-35b-a3b"), std::string::npos) << what;
  }
}

TEST(ModelPreset, FilePresetsAndTheirErrors) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ds_preset_test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string good = write("good.json", R"({"preset": "mine", "text_config": {
      "model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "linear_num_key_heads": 1,
      "linear_num_value_heads": 2, "linear_key_head_dim": 8, "intermediate_size": 48,
      "max_position_embeddings": 128}})");
  const ModelPreset p = find_preset(good);
  EXPECT_EQ(p.name, "mine");
  EXPECT_EQ(p.config.num_attention_layers(), 1);
  EXPECT_EQ(p.config.rope_dims, 4);

  EXPECT_THROW(find_preset((dir / "absent.json").string()), std::runtime_error);
  EXPECT_THROW(find_preset(write("bad.json", "{not json")), std::runtime_error);
  EXPECT_THROW(find_preset(write("noname.json", R"({"text_config": {}})")), std::runtime_error);
  const std::string zero = write("zero.json", R"({"preset": "z", "text_config": {
      "model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 0, "num_hidden_layers": 4,
      "num_attention_heads": 2, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
      "linear_key_head_dim": 8, "intermediate_size": 48, "max_position_embeddings": 128}})");
  try {
    find_preset(zero);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_embd"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deltaserve::runtime
