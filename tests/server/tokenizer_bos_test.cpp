// The start token is added exactly when the model's metadata says so (add_bos_token in the
// GGUF or in tokenizer_config.json), as HF tokenizers and llama.cpp do: Qwen3's tokenizer
// says false, so "with special tokens" gives HF's ids; llama.cpp's Qwen GGUFs carry a bos id
// (<|endoftext|>) with add_bos_token = false, which must not put it in front of prompts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "server/tokenizer_codec.h"
#include "tests/runtime/gguf_writer.h"

namespace deltaserve::server {
namespace {

constexpr const char* kQwen3Dir = "tests/fixtures/qwen3_tokenizer";
constexpr int32_t kEndOfText = 151643;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// Qwen3's vocabulary as llama.cpp writes it into a GGUF (bos id included); add_bos_token
// absent, false or true.
std::unique_ptr<runtime::Tokenizer> qwen3_gguf_tokenizer(const deltaserve::testing::TempDir& dir,
                                                         std::optional<bool> add_bos) {
  const nlohmann::json root = nlohmann::json::parse(read_file(std::string(kQwen3Dir) + "/tokenizer.json"));
  std::vector<std::string> tokens(151936);  // Qwen3's embedding rows
  std::vector<int32_t> types(tokens.size(), 5);
  for (const auto& [text, id] : root["model"]["vocab"].items()) {
    tokens[id.get<int32_t>()] = text;
    types[id.get<int32_t>()] = 1;
  }
  for (const auto& a : root["added_tokens"]) {
    tokens[a["id"].get<int32_t>()] = a["content"].get<std::string>();
    types[a["id"].get<int32_t>()] = a["special"].get<bool>() ? 3 : 4;
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty()) tokens[id] = "[PAD" + std::to_string(id) + "]";
  }
  std::vector<std::string> merges;
  for (const auto& m : root["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  deltaserve::testing::GgufWriter w;
  w.add_string("general.architecture", "qwen35");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", kEndOfText);
  w.add_u32("tokenizer.ggml.eos_token_id", 151645);
  if (add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *add_bos);
  const std::string path = dir.file(std::string("bos_") + (add_bos ? (*add_bos ? "true" : "false") : "absent") + ".gguf");
  deltaserve::testing::write_file(path, w.build());
  return runtime::Tokenizer::from_gguf(*runtime::GgufFile::open(path));
}

std::unique_ptr<TokenizerCodec> codec_of(std::unique_ptr<runtime::Tokenizer> tokenizer) {
  return std::make_unique<TokenizerCodec>(std::move(tokenizer), kFallbackChatTemplate);
}

TEST(TokenizerBos, Qwen3TokenizerJsonGivesHfIdsWithSpecialTokens) {
  // HF's Qwen3 post-processor adds nothing: its ids with add_special_tokens are the
  // reference ids (written without), for every row of the fixture's corpus we sample.
  const auto codec = codec_of(runtime::Tokenizer::from_json_file(std::string(kQwen3Dir) + "/tokenizer.json"));
  const auto corpus = read_jsonl(std::string(kQwen3Dir) + "/corpus.jsonl");
  const auto reference = read_jsonl(std::string(kQwen3Dir) + "/reference_ids.jsonl");
  ASSERT_GT(reference.size(), 1u);
  size_t checked = 0;
  for (size_t row = 1; row < reference.size(); row += 37) {
    const int64_t id = reference[row]["id"].get<int64_t>();
    const std::string text = corpus[static_cast<size_t>(id)]["text"].get<std::string>();
    ASSERT_EQ(codec->encode(text, true), reference[row]["ids"].get<std::vector<int32_t>>()) << text;
    ++checked;
  }
  EXPECT_GT(checked, 200u);
}

TEST(TokenizerBos, TokenizerConfigAddBosTokenIsFollowed) {
  const std::string tokenizer_json = read_file(std::string(kQwen3Dir) + "/tokenizer.json");
  nlohmann::json config = nlohmann::json::parse(read_file(std::string(kQwen3Dir) + "/tokenizer_config.json"));
  config["bos_token"] = "<|endoftext|>";  // a bos token, but add_bos_token false: not added
  auto off = runtime::Tokenizer::from_json_string(tokenizer_json, config.dump());
  EXPECT_EQ(off->bos_id(), kEndOfText);
  EXPECT_FALSE(off->add_bos_token());
  EXPECT_EQ(codec_of(std::move(off))->encode("Hello", true), (std::vector<int32_t>{9707}));
  config["add_bos_token"] = true;
  auto on = runtime::Tokenizer::from_json_string(tokenizer_json, config.dump());
  EXPECT_TRUE(on->add_bos_token());
  const auto codec = codec_of(std::move(on));
  EXPECT_EQ(codec->encode("Hello", true), (std::vector<int32_t>{kEndOfText, 9707}));
  EXPECT_EQ(codec->encode("Hello", false), (std::vector<int32_t>{9707}));
}

TEST(TokenizerBos, GgufAddBosTokenIsFollowed) {
  deltaserve::testing::TempDir dir;
  const std::string text = "Hello, world!";
  const std::vector<int32_t> hf = {9707, 11, 1879, 0};  // reference_ids.jsonl row 4
  EXPECT_EQ(codec_of(qwen3_gguf_tokenizer(dir, false))->encode(text, true), hf);
  EXPECT_EQ(codec_of(qwen3_gguf_tokenizer(dir, std::nullopt))->encode(text, true), hf);
  std::vector<int32_t> with_bos = {kEndOfText};
  with_bos.insert(with_bos.end(), hf.begin(), hf.end());
  const auto on = codec_of(qwen3_gguf_tokenizer(dir, true));
  EXPECT_EQ(on->encode(text, true), with_bos);
  EXPECT_EQ(on->encode(text, false), hf);
}

}  // namespace
}  // namespace deltaserve::server
