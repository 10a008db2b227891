// GgufFile parsing and getters, and load_model() on valid tiny qwen35 / qwen35moe files.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/gguf_file.h"
#include "runtime/gguf_loader.h"
#include "runtime/model_weights.h"
#include "tests/runtime/tiny_gguf_model.h"

namespace deltaserve::runtime {
namespace {

using testing::GgufWriter;
using testing::TempDir;
using testing::TinySpec;

std::string write_gguf(const TempDir& dir, const GgufWriter& w, const std::string& name = "m.gguf") {
  const std::string path = dir.file(name);
  testing::write_file(path, w.build());
  return path;
}

TEST(GgufFile, MetadataGetters) {
  GgufWriter w;
  w.add_u32("u32", 7);
  w.add_i32("i32", -3);
  w.add_u64("u64", uint64_t{1} << 40);
  w.add_f32("f32", 0.5f);
  w.add_bool("flag", true);
  w.add_string("s", "hello");
  w.add_string_array("strings", {"a", "", "ccc"});
  w.add_i32_array("ints", {1, -2, 3});
  w.add_scalar<double>("f64", GgufType::Float64, 2.25);
  w.add_scalar<int8_t>("i8", GgufType::Int8, -5);
  TempDir dir;
  const auto file = GgufFile::open(write_gguf(dir, w));
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->get_uint("u32"), 7u);
  EXPECT_EQ(file->get_int("u32"), 7);
  EXPECT_EQ(file->get_int("i32"), -3);
  EXPECT_EQ(file->get_uint("u64"), uint64_t{1} << 40);
  EXPECT_EQ(file->get_int("i8"), -5);
  EXPECT_DOUBLE_EQ(file->get_float("f32"), 0.5);
  EXPECT_DOUBLE_EQ(file->get_float("f64"), 2.25);
  EXPECT_DOUBLE_EQ(file->get_float("u32"), 7.0);  // integers are accepted as floats
  EXPECT_TRUE(file->get_bool("flag"));
  EXPECT_EQ(file->get_string("s"), "hello");
  EXPECT_EQ(file->get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(file->get_int_array("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(file->find("ints")->array_type, GgufType::Int32);
  EXPECT_EQ(file->find("missing"), nullptr);
  EXPECT_TRUE(file->tensors().empty());

  auto expect_error = [&](auto fn, const std::string& substring) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected: " << substring;
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
    }
  };
  expect_error([&] { file->get_uint("i32"); }, "key 'i32': negative value -3");
  expect_error([&] { file->get_uint("missing"); }, "key 'missing': missing");
  expect_error([&] { file->get_string("u32"); }, "expected a string, found uint32");
  expect_error([&] { file->get_int("s"); }, "expected an integer, found string");
  expect_error([&] { file->get_bool("u32"); }, "expected a bool");
  expect_error([&] { file->get_string_array("ints"); }, "found array of int32");
  expect_error([&] { file->get_float_array("strings"); }, "expected a float array");
}

TEST(GgufFile, TensorInfosAndAlignment) {
  GgufWriter w;
  w.alignment = 64;
  w.add_u32("general.alignment", 64);
  w.add_tensor("a", 0, {3}, testing::Bytes(12, 1));
  w.add_tensor("b", 8, {32, 2}, testing::Bytes(68, 2));  // Q8_0: 2 blocks of 34 bytes
  TempDir dir;
  const auto file = GgufFile::open(write_gguf(dir, w));
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->data_offset() % 64, 0u);
  ASSERT_EQ(file->tensors().size(), 2u);
  const TensorView* b = file->find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, kernels::DType::Q8_0);
  EXPECT_EQ(b->num_dims, 2);
  EXPECT_EQ(b->ne, (std::array<int64_t, 4>{32, 2, 1, 1}));
  EXPECT_EQ(b->num_bytes, 68u);
  EXPECT_EQ(b->row_bytes(), 34u);
  EXPECT_EQ(static_cast<uint8_t>(b->data[0]), 2);
  EXPECT_EQ(file->find_tensor("a")->num_bytes, 12u);
  EXPECT_EQ(file->find_tensor("c"), nullptr);
}

TEST(GgufFile, AcceptsVersion2) {
  GgufWriter w = testing::make_tiny_gguf({});
  w.version = 2;
  TempDir dir;
  EXPECT_EQ(GgufFile::open(write_gguf(dir, w))->version(), 2u);
}

TEST(GgufLoader, DenseModel) {
  const TinySpec spec;
  const GgufWriter w = testing::make_tiny_gguf(spec);
  TempDir dir;
  const auto model = load_model(write_gguf(dir, w));
  const ModelConfig& c = model->config;
  EXPECT_EQ(model->format, "gguf");
  EXPECT_EQ(c.arch, Architecture::Dense);
  EXPECT_EQ(c.name, "tiny qwen35");
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_EQ(c.num_vocab, 96);
  EXPECT_EQ(c.num_embd, 64);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_dims, 8);
  EXPECT_FLOAT_EQ(c.rope_base, 1e7f);
  EXPECT_EQ(c.ssm_k_heads, 2);
  EXPECT_EQ(c.ssm_v_heads, 4);
  EXPECT_EQ(c.conv_channels(), 2 * 32 + 64);
  EXPECT_EQ(c.ffn_dim, 96);
  EXPECT_EQ(c.bos_token, 1);
  EXPECT_EQ(c.eos_token, 2);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.layer_kinds, (std::vector<LayerKind>{LayerKind::GatedDeltaNet, LayerKind::GatedDeltaNet,
                                                   LayerKind::GatedDeltaNet, LayerKind::Attention}));
  EXPECT_EQ(c.num_attention_layers(), 1);
  EXPECT_EQ(c.num_gdn_layers(), 3);
  EXPECT_EQ(model->chat_template, "{{ messages }}");
  ASSERT_NE(model->gguf, nullptr);

  const ModelWeights& wt = model->weights;
  ASSERT_EQ(wt.layers.size(), 4u);
  EXPECT_EQ(wt.layers[0].gdn.qkv.name, "blk.0.attn_qkv.weight");
  EXPECT_EQ(wt.layers[0].gdn.conv.ne, (std::array<int64_t, 4>{4, 128, 1, 1}));
  EXPECT_EQ(wt.layers[3].kind, LayerKind::Attention);
  EXPECT_EQ(wt.layers[3].attention.q.ne, (std::array<int64_t, 4>{64, 128, 1, 1}));
  EXPECT_EQ(wt.layers[2].ffn.down.ne, (std::array<int64_t, 4>{96, 64, 1, 1}));
  EXPECT_TRUE(wt.has_mtp);
  EXPECT_EQ(wt.mtp.eh_proj.ne, (std::array<int64_t, 4>{128, 64, 1, 1}));
  EXPECT_EQ(wt.mtp.layer.kind, LayerKind::Attention);
  EXPECT_EQ(wt.mtp.layer.attention.k_norm.name, "blk.4.attn_k_norm.weight");
  // Views point at the bytes the writer wrote.
  const auto* src = w.tensors[0].data.data();
  EXPECT_EQ(wt.token_embd.name, "token_embd.weight");
  EXPECT_EQ(std::memcmp(wt.token_embd.data, src, wt.token_embd.num_bytes), 0);
  EXPECT_NE(wt.output.data, wt.token_embd.data);
  EXPECT_EQ(model->tensors.size(), w.tensors.size());
}

TEST(GgufLoader, MoeModelWithF16Matrices) {
  TinySpec spec;
  spec.moe = true;
  spec.matrix_type = 1;
  TempDir dir;
  const auto model = load_model(write_gguf(dir, testing::make_tiny_gguf(spec)));
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.arch, Architecture::Moe);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.num_experts_used, 2);
  EXPECT_EQ(c.expert_ffn_dim, 32);
  EXPECT_EQ(c.shared_ffn_dim, 32);
  const FfnWeights& f = model->weights.layers[1].ffn;
  EXPECT_EQ(f.router.type, kernels::DType::F32);
  EXPECT_EQ(f.gate_exps.type, kernels::DType::F16);
  EXPECT_EQ(f.gate_exps.ne, (std::array<int64_t, 4>{64, 32, 4, 1}));
  EXPECT_EQ(f.down_exps.ne, (std::array<int64_t, 4>{32, 64, 4, 1}));
  EXPECT_TRUE(f.gate_exps.is_contiguous());
  EXPECT_EQ(f.shared_gate_inp.ne, (std::array<int64_t, 4>{64, 1, 1, 1}));
  EXPECT_EQ(model->weights.mtp.layer.ffn.up_shexp.name, "blk.4.ffn_up_shexp.weight");
}

TEST(GgufLoader, TiedEmbeddingsAndNoMtp) {
  TinySpec spec;
  spec.tied = true;
  spec.mtp = false;
  TempDir dir;
  const auto model = load_model(write_gguf(dir, testing::make_tiny_gguf(spec)));
  EXPECT_TRUE(model->config.tied_embeddings);
  EXPECT_EQ(model->config.num_mtp_layers, 0);
  EXPECT_FALSE(model->weights.has_mtp);
  EXPECT_EQ(model->weights.output.data, model->weights.token_embd.data);
}

TEST(GgufLoader, FusedGateUpExpertsSplitIntoStridedViews) {
  TinySpec spec;
  spec.moe = true;
  spec.fused_gate_up = true;
  const GgufWriter w = testing::make_tiny_gguf(spec);
  TempDir dir;
  const auto model = load_model(write_gguf(dir, w));
  const FfnWeights& f = model->weights.layers[0].ffn;
  const TensorView& fused = model->tensors.at("blk.0.ffn_gate_up_exps.weight");
  EXPECT_EQ(f.gate_exps.ne, (std::array<int64_t, 4>{64, 32, 4, 1}));
  EXPECT_EQ(f.up_exps.ne, f.gate_exps.ne);
  EXPECT_FALSE(f.gate_exps.is_contiguous());
  const size_t row = fused.row_bytes();
  for (int64_t e = 0; e < 4; ++e) {
    EXPECT_EQ(f.gate_exps.slice(e), fused.data + row * static_cast<size_t>(e * 64));
    EXPECT_EQ(f.up_exps.slice(e), fused.data + row * static_cast<size_t>(e * 64 + 32));
    for (int64_t i = 0; i < 32; ++i) {
      EXPECT_EQ(f.gate_exps.row(e * 32 + i), fused.row(e * 64 + i));
      EXPECT_EQ(f.up_exps.row(e * 32 + i), fused.row(e * 64 + 32 + i));
    }
  }
}

TEST(ModelConfig, ValidateRejectsInconsistentHeads) {
  ModelConfig c;
  c.num_vocab = 10;
  c.num_embd = 8;
  c.num_layers = 4;
  c.context_length = 16;
  c.num_heads = 3;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.rope_dims = 2;
  c.ssm_k_heads = 1;
  c.ssm_v_heads = 2;
  c.ssm_head_dim = 4;
  c.ffn_dim = 8;
  c.layer_kinds = layer_kinds_from_interval(4, 4);
  EXPECT_THROW(validate(c), std::runtime_error);
  c.num_heads = 4;
  EXPECT_NO_THROW(validate(c));
  c.ssm_v_heads = 3;
  c.ssm_k_heads = 2;
  EXPECT_THROW(validate(c), std::runtime_error);
  EXPECT_THROW(layer_kinds_from_interval(int64_t{1} << 40, 4), std::runtime_error);
}

}  // namespace
}  // namespace deltaserve::runtime
