// HF directory loading: config.json, (sharded) safetensors, and the conversion to the GGUF
// conventions checked against hand-computed expectations (MODEL.md 5.4, 5.5).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "runtime/model_weights.h"
#include "runtime/safetensors_file.h"
#include "tests/runtime/safetensors_writer.h"

namespace deltaserve::runtime {
namespace {

using testing::HfTensor;
using json = nlohmann::json;

// Tiny dims: H=8, 4 layers (layer 3 attention), Hk=2, Hv=4 (r=2), dk=dv=2, so Dk=4, Dv=8,
// Dc=16; attention 2 heads / 1 KV head of 4; MoE E=2, Ie=Is=4; dense I=8.
constexpr int64_t H = 8, L = 4, V = 16, nh = 2, nkv = 1, hd = 4, Hk = 2, Hv = 4, d = 2, Kc = 4;
constexpr int64_t Dk = Hk * d, Dv = Hv * d, Dc = 2 * Dk + Dv, I = 8, E = 2, Ie = 4, Is = 4;
// GGUF value head n holds HF value head kPerm[n]: j = kappa*r + rho -> n = rho*Hk + kappa.
constexpr int64_t kPerm[Hv] = {0, 2, 1, 3};

class HfModelBuilder {
 public:
  explicit HfModelBuilder(bool moe) : moe_(moe) {}

  std::map<std::string, HfTensor> tensors;

  void add(const std::string& name, std::vector<int64_t> shape, const std::string& dtype = "BF16") {
    HfTensor t{dtype, std::move(shape), {}};
    int64_t n = 1;
    for (int64_t x : t.shape) n *= x;
    for (int64_t i = 0; i < n; ++i) {  // k/32 with |k| <= 30: exact in BF16
      t.values.push_back(static_cast<float>(static_cast<int>((i * 7 + counter_ * 13) % 61) - 30) / 32.0f);
    }
    ++counter_;
    tensors[name] = std::move(t);
  }

  void add_block(const std::string& p, bool attention, bool legacy_experts) {
    add(p + "input_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
    if (attention) {
      add(p + "self_attn.q_proj.weight", {2 * nh * hd, H});
      add(p + "self_attn.k_proj.weight", {nkv * hd, H});
      add(p + "self_attn.v_proj.weight", {nkv * hd, H});
      add(p + "self_attn.o_proj.weight", {H, nh * hd});
      add(p + "self_attn.q_norm.weight", {hd});
      add(p + "self_attn.k_norm.weight", {hd});
    } else {
      add(p + "linear_attn.in_proj_qkv.weight", {Dc, H});
      add(p + "linear_attn.in_proj_z.weight", {Dv, H});
      add(p + "linear_attn.in_proj_b.weight", {Hv, H});
      add(p + "linear_attn.in_proj_a.weight", {Hv, H});
      add(p + "linear_attn.conv1d.weight", {Dc, 1, Kc});
      add(p + "linear_attn.dt_bias", {Hv});
      add(p + "linear_attn.A_log", {Hv}, "F32");
      add(p + "linear_attn.norm.weight", {d}, "F32");
      add(p + "linear_attn.out_proj.weight", {H, Dv});
    }
    if (!moe_) {
      add(p + "mlp.gate_proj.weight", {I, H});
      add(p + "mlp.up_proj.weight", {I, H});
      add(p + "mlp.down_proj.weight", {H, I});
      return;
    }
    add(p + "mlp.gate.weight", {E, H});
    if (legacy_experts) {
      for (int e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {Ie, H});
        add(x + "up_proj.weight", {Ie, H});
        add(x + "down_proj.weight", {H, Ie});
      }
    } else {
      add(p + "mlp.experts.gate_up_proj", {E, 2 * Ie, H});
      add(p + "mlp.experts.down_proj", {E, H, Ie});
    }
    add(p + "mlp.shared_expert.gate_proj.weight", {Is, H});
    add(p + "mlp.shared_expert.up_proj.weight", {Is, H});
    add(p + "mlp.shared_expert.down_proj.weight", {H, Is});
    add(p + "mlp.shared_expert_gate.weight", {1, H});
  }

  void add_model(const std::string& prefix, bool lm_head, bool mtp) {
    add(prefix + "embed_tokens.weight", {V, H});
    add(prefix + "norm.weight", {H});
    if (lm_head) add("lm_head.weight", {V, H});
    for (int64_t i = 0; i < L; ++i) {
      add_block(prefix + "layers." + std::to_string(i) + ".", (i + 1) % 4 == 0, i == 1);
    }
    if (mtp) {
      add("mtp.fc.weight", {H, 2 * H});
      add("mtp.pre_fc_norm_embedding.weight", {H});
      add("mtp.pre_fc_norm_hidden.weight", {H});
      add("mtp.norm.weight", {H});
      add_block("mtp.layers.0.", true, false);
    }
    add("model.visual.blocks.0.attn.qkv.weight", {4, 4});  // ignored: vision tower
  }

  const std::vector<float>& values(const std::string& name) const { return tensors.at(name).values; }

 private:
  bool moe_;
  int counter_ = 0;
};

json text_config(bool moe) {
  json c = {{"model_type", moe ? "qwen3_5_moe_text" : "qwen3_5_text"},
            {"vocab_size", V}, {"hidden_size", H}, {"num_hidden_layers", L},
            {"num_attention_heads", nh}, {"num_key_value_heads", nkv}, {"head_dim", hd},
            {"linear_conv_kernel_dim", Kc}, {"linear_key_head_dim", d}, {"linear_value_head_dim", d},
            {"linear_num_key_heads", Hk}, {"linear_num_value_heads", Hv}, {"full_attention_interval", 4},
            {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 4096}, {"mtp_num_hidden_layers", 1},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.5}}},
            {"bos_token_id", 1}, {"eos_token_id", 2}};
  if (moe) {
    c["num_experts"] = E;
    c["num_experts_per_tok"] = 1;
    c["moe_intermediate_size"] = Ie;
    c["shared_expert_intermediate_size"] = Is;
  } else {
    c["intermediate_size"] = I;
  }
  return c;
}

float element(const TensorView& t, int64_t i) {
  if (t.type == kernels::DType::F32) {
    float v;
    std::memcpy(&v, t.data + 4 * i, 4);
    return v;
  }
  EXPECT_EQ(t.type, kernels::DType::BF16) << t.name;
  uint16_t b;
  std::memcpy(&b, t.data + 2 * i, 2);
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Writes the MoE model as two shards with an index, the config nested in text_config.
class HfMoeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    b_.add_model("model.language_model.", /*lm_head=*/false, /*mtp=*/true);
    std::map<std::string, HfTensor> shard1, shard2;
    json weight_map = json::object();
    for (const auto& [name, t] : b_.tensors) {
      const bool first = name.find("layers.1.") == std::string::npos && name.rfind("mtp.", 0) != 0;
      (first ? shard1 : shard2)[name] = t;
      weight_map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    testing::write_file(dir_.file("model-00001-of-00002.safetensors"), testing::safetensors_bytes(shard1));
    testing::write_file(dir_.file("model-00002-of-00002.safetensors"), testing::safetensors_bytes(shard2));
    testing::write_text(dir_.file("model.safetensors.index.json"), json{{"weight_map", weight_map}}.dump());
    const json config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}}, {"model_type", "qwen3_5_moe"},
                         {"text_config", text_config(true)}, {"tie_word_embeddings", false}};
    testing::write_text(dir_.file("config.json"), config.dump());
    testing::write_text(dir_.file("tokenizer.json"), "{}");
    const json tok = {{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}};
    testing::write_text(dir_.file("tokenizer_config.json"), tok.dump());
    model_ = load_model(dir_.path().string());
  }

  const TensorView& t(const std::string& name) const { return model_->tensors.at(name); }
  const std::vector<float>& hf(const std::string& name) const {
    return b_.values("model.language_model.layers." + name);
  }

  HfModelBuilder b_{true};
  testing::TempDir dir_;
  std::unique_ptr<LoadedModel> model_;
};

TEST_F(HfMoeTest, ConfigAndFiles) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(model_->format, "hf");
  EXPECT_EQ(c.arch, Architecture::Moe);
  EXPECT_TRUE(c.tied_embeddings);  // no lm_head.weight
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_EQ(c.rope_dims, 2);
  EXPECT_EQ(c.num_experts, 2);
  EXPECT_EQ(c.layer_kinds[3], LayerKind::Attention);
  EXPECT_EQ(c.bos_token, 1);
  EXPECT_EQ(model_->weights.output.data, model_->weights.token_embd.data);
  EXPECT_EQ(model_->mappings.size(), 2u);
  EXPECT_EQ(model_->tokenizer_json_path, dir_.file("tokenizer.json"));
  EXPECT_EQ(model_->chat_template, "D");
  EXPECT_EQ(model_->tensors.count("model.visual.blocks.0.attn.qkv.weight"), 0u);
}

TEST_F(HfMoeTest, NormsGetPlusOneExceptGatedNorm) {
  const auto& norm = b_.values("model.language_model.norm.weight");
  const TensorView& out = t("output_norm.weight");
  EXPECT_EQ(out.type, kernels::DType::F32);
  for (int64_t i = 0; i < H; ++i) EXPECT_FLOAT_EQ(element(out, i), norm[i] + 1.0f);
  const auto& qn = b_.values("mtp.layers.0.self_attn.q_norm.weight");
  for (int64_t i = 0; i < hd; ++i) EXPECT_FLOAT_EQ(element(t("blk.4.attn_q_norm.weight"), i), qn[i] + 1.0f);
  const auto& en = b_.values("mtp.pre_fc_norm_embedding.weight");
  for (int64_t i = 0; i < H; ++i) EXPECT_FLOAT_EQ(element(t("blk.4.nextn.enorm.weight"), i), en[i] + 1.0f);
  const auto& gated = hf("0.linear_attn.norm.weight");
  for (int64_t i = 0; i < d; ++i) EXPECT_FLOAT_EQ(element(t("blk.0.ssm_norm.weight"), i), gated[i]);
  EXPECT_EQ(t("blk.0.ffn_gate_inp_shexp.weight").type, kernels::DType::F32);
  EXPECT_EQ(t("blk.0.ffn_gate_inp.weight").type, kernels::DType::F32);
}

TEST_F(HfMoeTest, SsmAIsNegExpOfALogInTiledHeadOrder) {
  const auto& a_log = hf("0.linear_attn.A_log");
  const TensorView& a = t("blk.0.ssm_a");
  // Hand-computed: HF heads (k0 r0, k0 r1, k1 r0, k1 r1) -> GGUF (k0 r0, k1 r0, k0 r1, k1 r1).
  EXPECT_FLOAT_EQ(element(a, 0), -std::exp(a_log[0]));
  EXPECT_FLOAT_EQ(element(a, 1), -std::exp(a_log[2]));
  EXPECT_FLOAT_EQ(element(a, 2), -std::exp(a_log[1]));
  EXPECT_FLOAT_EQ(element(a, 3), -std::exp(a_log[3]));
  const auto& dt = hf("0.linear_attn.dt_bias");
  const TensorView& dt_bias = t("blk.0.ssm_dt.bias");
  EXPECT_EQ(dt_bias.type, kernels::DType::F32);
  for (int64_t n = 0; n < Hv; ++n) EXPECT_FLOAT_EQ(element(dt_bias, n), dt[kPerm[n]]);
}

TEST_F(HfMoeTest, ValueHeadPermutationOnProjections) {
  const auto& qkv = hf("0.linear_attn.in_proj_qkv.weight");
  const TensorView& g_qkv = t("blk.0.attn_qkv.weight");
  EXPECT_EQ(g_qkv.ne, (std::array<int64_t, 4>{H, Dc, 1, 1}));
  for (int64_t row = 0; row < 2 * Dk; ++row) {  // q and k rows untouched
    for (int64_t c = 0; c < H; ++c) EXPECT_EQ(element(g_qkv, row * H + c), qkv[row * H + c]);
  }
  for (int64_t n = 0; n < Hv; ++n) {
    for (int64_t r = 0; r < d; ++r) {
      const int64_t dst = 2 * Dk + n * d + r, src = 2 * Dk + kPerm[n] * d + r;
      for (int64_t c = 0; c < H; ++c) EXPECT_EQ(element(g_qkv, dst * H + c), qkv[src * H + c]);
    }
  }
  const auto& z = hf("0.linear_attn.in_proj_z.weight");
  const auto& beta = hf("0.linear_attn.in_proj_b.weight");
  for (int64_t n = 0; n < Hv; ++n) {
    for (int64_t c = 0; c < H; ++c) {
      EXPECT_EQ(element(t("blk.0.attn_gate.weight"), (n * d + 1) * H + c), z[(kPerm[n] * d + 1) * H + c]);
      EXPECT_EQ(element(t("blk.0.ssm_beta.weight"), n * H + c), beta[kPerm[n] * H + c]);
    }
  }
  const auto& out = hf("0.linear_attn.out_proj.weight");  // [H, Dv]: input columns permuted
  for (int64_t o = 0; o < H; ++o) {
    for (int64_t n = 0; n < Hv; ++n) {
      for (int64_t r = 0; r < d; ++r) {
        EXPECT_EQ(element(t("blk.0.ssm_out.weight"), o * Dv + n * d + r), out[o * Dv + kPerm[n] * d + r]);
      }
    }
  }
}

TEST_F(HfMoeTest, ConvSqueezedToF32WithValueChannelsPermuted) {
  const auto& conv = hf("0.linear_attn.conv1d.weight");  // [Dc, 1, Kc]
  const TensorView& g = t("blk.0.ssm_conv1d.weight");
  EXPECT_EQ(g.type, kernels::DType::F32);
  EXPECT_EQ(g.num_dims, 2);
  EXPECT_EQ(g.ne, (std::array<int64_t, 4>{Kc, Dc, 1, 1}));
  for (int64_t ch = 0; ch < Dc; ++ch) {
    const int64_t v = ch - 2 * Dk;
    const int64_t src = v < 0 ? ch : 2 * Dk + kPerm[v / d] * d + v % d;
    for (int64_t k = 0; k < Kc; ++k) EXPECT_EQ(element(g, ch * Kc + k), conv[src * Kc + k]);
  }
}

TEST_F(HfMoeTest, ExpertsSplitAndStacked) {
  const auto& gate_up = hf("0.mlp.experts.gate_up_proj");  // [E, 2Ie, H]
  const TensorView& gate = t("blk.0.ffn_gate_exps.weight");
  const TensorView& up = t("blk.0.ffn_up_exps.weight");
  EXPECT_EQ(gate.ne, (std::array<int64_t, 4>{H, Ie, E, 1}));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < Ie * H; ++i) {
      EXPECT_EQ(element(gate, e * Ie * H + i), gate_up[e * 2 * Ie * H + i]);
      EXPECT_EQ(element(up, e * Ie * H + i), gate_up[e * 2 * Ie * H + Ie * H + i]);
    }
  }
  EXPECT_EQ(t("blk.0.ffn_down_exps.weight").ne, (std::array<int64_t, 4>{Ie, H, E, 1}));
  // Layer 1 uses legacy per-expert names: stacked in expert order.
  const TensorView& down1 = t("blk.1.ffn_down_exps.weight");
  EXPECT_EQ(down1.ne, (std::array<int64_t, 4>{Ie, H, E, 1}));
  for (int64_t e = 0; e < E; ++e) {
    const auto& src = hf("1.mlp.experts." + std::to_string(e) + ".down_proj.weight");
    for (int64_t i = 0; i < H * Ie; ++i) EXPECT_EQ(element(down1, e * H * Ie + i), src[i]);
  }
  EXPECT_EQ(model_->weights.layers[1].ffn.gate_exps.name, "blk.1.ffn_gate_exps.weight");
  EXPECT_EQ(model_->weights.mtp.eh_proj.ne, (std::array<int64_t, 4>{2 * H, H, 1, 1}));
}

TEST(HfLoader, DenseTopLevelConfigSingleFileTied) {
  HfModelBuilder b(false);
  b.add_model("model.", /*lm_head=*/true, /*mtp=*/false);
  testing::TempDir dir;
  testing::write_file(dir.file("model.safetensors"), testing::safetensors_bytes(b.tensors));
  json config = text_config(false);
  config["tie_word_embeddings"] = true;
  testing::write_text(dir.file("config.json"), config.dump());
  testing::write_text(dir.file("tokenizer_config.json"), json{{"chat_template", "{{ x }}"}}.dump());
  const auto model = load_model(dir.path().string());
  EXPECT_EQ(model->config.arch, Architecture::Dense);
  EXPECT_EQ(model->config.num_mtp_layers, 0);  // config says 1, but no mtp.* tensors
  EXPECT_TRUE(model->config.tied_embeddings);
  EXPECT_EQ(model->tensors.count("output.weight"), 0u);
  EXPECT_EQ(model->weights.output.data, model->weights.token_embd.data);
  EXPECT_EQ(model->weights.layers[2].ffn.down.ne, (std::array<int64_t, 4>{I, H, 1, 1}));
  EXPECT_EQ(model->chat_template, "{{ x }}");
  EXPECT_TRUE(model->tokenizer_json_path.empty());
}

struct HfErrorCase {
  const char* name;
  std::function<void(json& config, std::map<std::string, HfTensor>& tensors)> edit;
  const char* expected;
};

TEST(HfLoader, ClearErrors) {
  const std::vector<HfErrorCase> cases = {
      {"unsupported_model_type", [](json& c, auto&) { c["model_type"] = "llama"; }, "unsupported architecture 'llama'"},
      {"missing_field", [](json& c, auto&) { c.erase("hidden_size"); }, "'hidden_size': missing"},
      {"wrong_field_type", [](json& c, auto&) { c["num_hidden_layers"] = "4"; }, "'num_hidden_layers': expected an integer"},
      {"inconsistent_heads", [](json& c, auto&) { c["num_key_value_heads"] = 3; }, "num_kv_heads = 3 is outside [1, 2]"},
      {"bad_layer_types", [](json& c, auto&) { c["layer_types"] = {"linear_attention"}; }, "'layer_types'"},
      {"missing_tensor", [](json&, auto& t) { t.erase("model.layers.0.linear_attn.A_log"); },
       "tensor 'blk.0.ssm_a': missing"},
      {"wrong_shape", [](json&, auto& t) { t["model.layers.0.linear_attn.in_proj_z.weight"].shape = {Dv, H - 1};
                                            t["model.layers.0.linear_attn.in_proj_z.weight"].values.resize(Dv * (H - 1)); },
       "expected shape [8, 8], got [8, 7]"},
      {"unknown_tensor", [](json&, auto& t) { t["model.layers.0.mystery.weight"] = {"F32", {1}, {0.0f}}; },
       "tensor 'model.layers.0.mystery.weight': unknown tensor name"},
      {"layer_out_of_range", [](json&, auto& t) { t["model.layers.9.input_layernorm.weight"] = {"F32", {H}, std::vector<float>(H)}; },
       "layer index out of range"},
  };
  for (const HfErrorCase& c : cases) {
    HfModelBuilder b(false);
    b.add_model("model.", true, false);
    json config = text_config(false);
    c.edit(config, b.tensors);
    testing::TempDir dir;
    testing::write_file(dir.file("model.safetensors"), testing::safetensors_bytes(b.tensors));
    testing::write_text(dir.file("config.json"), config.dump());
    try {
      load_model(dir.path().string());
      ADD_FAILURE() << c.name << ": loaded without error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << c.name << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << c.name;
    }
  }
}

TEST(SafetensorsFile, MalformedHeaders) {
  const testing::Bytes data(16, 0);
  const std::vector<std::pair<testing::Bytes, const char*>> cases = {
      {testing::Bytes(5, 0), "truncated header"},
      {testing::safetensors_raw("", data), "invalid JSON"},
      {[] { testing::Bytes b; testing::put_pod<uint64_t>(b, uint64_t{1} << 62); return b; }(), "exceeds the file"},
      {testing::safetensors_raw("{\"a\":", data), "invalid JSON"},
      {testing::safetensors_raw("[1]", data), "not a JSON object"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data),
       "tensor 'a': duplicate name"},
      {testing::safetensors_raw(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data), "unsupported dtype 'I64'"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", data), "shape needs 8"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", data), "outside the data section"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data),
       "tensor 'b': data overlaps tensor 'a'"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", data), "is zero"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", data), "larger than the file"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", data), "unsigned integers"},
      {testing::safetensors_raw(R"({"a":{"dtype":"F32","shape":[1]}})", data), "exactly dtype, shape and data_offsets"},
  };
  testing::TempDir dir;
  int index = 0;
  for (const auto& [bytes, expected] : cases) {
    const std::string path = dir.file("bad" + std::to_string(index++) + ".safetensors");
    testing::write_file(path, bytes);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << path << ": opened without error, expected " << expected;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace deltaserve::runtime
