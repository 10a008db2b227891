// The GGUF writer and `bench write-gguf`'s file: a synthetic preset written with the embedded
// model's tokenizer loads back to the same config and the same bytes, its padded vocabulary
// decodes, and any GGUF this project reads survives a rewrite unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runtime/gguf_file.h"
#include "runtime/gguf_writer.h"
#include "runtime/model_preset.h"
#include "runtime/model_weights.h"
#include "runtime/synthetic_gguf.h"
#include "runtime/synthetic_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/gguf_writer.h"

namespace deltaserve::runtime {
namespace {

constexpr const char* kEmbeddedModel = "models/deltaserve-tiny-moe.gguf";

void expect_same_bytes(const TensorView& a, const TensorView& b) {
  ASSERT_EQ(a.type, b.type) << a.name;
  ASSERT_EQ(a.ne, b.ne) << a.name;
  ASSERT_EQ(a.num_rows(), b.num_rows()) << a.name;
  for (int64_t r = 0; r < a.num_rows(); ++r)
    ASSERT_EQ(std::memcmp(a.row(r), b.row(r), a.row_bytes()), 0) << a.name << " row " << r;
}

TEST(SyntheticGguf, PresetLoadsBackWithTheSameConfigAndBytes) {
  for (const char* preset_name : {"tiny-moe", "tiny-dense"}) {
    SCOPED_TRACE(preset_name);
    ModelPreset preset = find_preset(preset_name);
    // tiny-dense's vocabulary (97) is smaller than the embedded tokenizer's 5632 tokens.
    preset.config.num_vocab = std::max<int64_t>(preset.config.num_vocab, 5632);
    const auto synthetic = make_synthetic_model(preset.config, kernels::DType::Q4_0, 7, 2);
    const std::string tokenizer_file = kEmbeddedModel;
    const auto tokenizer_source = GgufFile::open(tokenizer_file);
    testing::TempDir dir;
    write_synthetic_gguf(*synthetic, *tokenizer_source, dir.file("synthetic.gguf"));

    const auto loaded = load_model(dir.file("synthetic.gguf"));
    const ModelConfig& a = synthetic->config;
    const ModelConfig& b = loaded->config;
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.num_vocab, b.num_vocab);
    EXPECT_EQ(a.num_embd, b.num_embd);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.num_mtp_layers, b.num_mtp_layers);
    EXPECT_EQ(a.context_length, b.context_length);
    EXPECT_EQ(a.rms_eps, b.rms_eps);
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
    EXPECT_EQ(a.num_heads, b.num_heads);
    EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.rope_dims, b.rope_dims);
    EXPECT_EQ(a.rope_base, b.rope_base);
    EXPECT_EQ(a.conv_kernel, b.conv_kernel);
    EXPECT_EQ(a.ssm_k_heads, b.ssm_k_heads);
    EXPECT_EQ(a.ssm_v_heads, b.ssm_v_heads);
    EXPECT_EQ(a.ssm_head_dim, b.ssm_head_dim);
    EXPECT_EQ(a.layer_kinds, b.layer_kinds);
    EXPECT_EQ(a.ffn_dim, b.ffn_dim);
    EXPECT_EQ(a.num_experts, b.num_experts);
    EXPECT_EQ(a.num_experts_used, b.num_experts_used);
    EXPECT_EQ(a.expert_ffn_dim, b.expert_ffn_dim);
    EXPECT_EQ(a.shared_ffn_dim, b.shared_ffn_dim);
    ASSERT_EQ(synthetic->tensors.size(), loaded->tensors.size());
    for (const auto& [name, view] : synthetic->tensors) {
      const auto it = loaded->tensors.find(name);
      ASSERT_NE(it, loaded->tensors.end()) << name;
      expect_same_bytes(view, it->second);
    }
    EXPECT_EQ(loaded->chat_template, load_model(tokenizer_file)->chat_template);
  }
}

TEST(SyntheticGguf, PaddedVocabularyDecodesAndEncodesAsTheSource) {
  ModelPreset preset = find_preset("tiny-moe");
  preset.config.num_vocab = 6000;  // more rows than the embedded tokenizer's 5632 tokens
  const auto synthetic = make_synthetic_model(preset.config, kernels::DType::Q8_0, 3, 2);
  const auto source = GgufFile::open(kEmbeddedModel);
  testing::TempDir dir;
  write_synthetic_gguf(*synthetic, *source, dir.file("padded.gguf"));
  const auto written = GgufFile::open(dir.file("padded.gguf"));
  EXPECT_EQ(written->get_string_array("tokenizer.ggml.tokens").size(), 6000u);
  EXPECT_EQ(written->get_int_array("tokenizer.ggml.token_type").size(), 6000u);

  const auto tokenizer = Tokenizer::from_gguf(*written);
  const auto original = Tokenizer::from_gguf(*source);
  const std::vector<int32_t> padded_ids{5999, 5632};
  EXPECT_EQ(tokenizer->decode(padded_ids), "[synthetic-5999][synthetic-5632]");
  const char* text = "Hello, world! <|im_start|>user\nThe quick brown fox.";
  EXPECT_EQ(tokenizer->encode(text), original->encode(text));
}

TEST(SyntheticGguf, TokenizerLargerThanTheVocabularyIsRefused) {
  const auto source = GgufFile::open(kEmbeddedModel);
  try {
    (void)padded_tokenizer_metadata(*source, 100);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("5632 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocabulary of 100"), std::string::npos) << e.what();
  }
}

// Every metadata value (each type the reader keeps) and every tensor of a real file survive
// read -> write -> read.
TEST(GgufWriter, RewritesAFileUnchanged) {
  for (const char* file : {kEmbeddedModel, "tests/fixtures/tiny_dense/model-q4_0.gguf"}) {
    SCOPED_TRACE(file);
    const auto original = GgufFile::open(file);
    GgufMetadata metadata(original->metadata().begin(), original->metadata().end());
    testing::TempDir dir;
    write_gguf(dir.file("copy.gguf"), metadata, original->tensors(), original->alignment());
    const auto copy = GgufFile::open(dir.file("copy.gguf"));
    // The writer declares general.alignment where the original left it implicit.
    EXPECT_EQ(copy->alignment(), original->alignment());
    EXPECT_EQ(copy->metadata().size(), original->metadata().size() + (original->find("general.alignment") ? 0 : 1));
    for (const auto& [key, value] : original->metadata()) {
      const GgufValue* v = copy->find(key);
      ASSERT_NE(v, nullptr) << key;
      EXPECT_EQ(v->type, value.type) << key;
      if (value.type == GgufType::Array) {
        EXPECT_EQ(v->array_type, value.array_type) << key;
      }
      EXPECT_EQ(v->value, value.value) << key;
    }
    ASSERT_EQ(copy->tensors().size(), original->tensors().size());
    for (size_t i = 0; i < copy->tensors().size(); ++i) {
      EXPECT_EQ(copy->tensors()[i].name, original->tensors()[i].name);
      expect_same_bytes(copy->tensors()[i], original->tensors()[i]);
    }
  }
}

TEST(GgufWriter, UnwritablePathNamesIt) {
  try {
    write_gguf("/nonexistent-folder/x.gguf", {}, {});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/x.gguf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltaserve::runtime
