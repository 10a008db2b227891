// The GGUF path: a GGUF vocabulary written the way llama.cpp's converter writes Qwen's
// (byte-level token strings, token types, "a b" merges, padding ids of type UNUSED) must
// tokenize exactly like tokenizer.json.
#include <gtest/gtest.h>

#include "runtime/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/gguf_writer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace deltaserve::runtime {
namespace {

using tokenizer_testing::kQwen3Dir;
using tokenizer_testing::qwen3_tokenizer;
using tokenizer_testing::read_jsonl;

constexpr int32_t kNumPaddedVocab = 151936;  // Qwen3's embedding rows

// Qwen3's tokenizer.json as GGUF metadata (built once per process: parsing is slow under
// the sanitizers).
deltaserve::testing::GgufWriter build_qwen3_gguf() {
  std::ifstream in(std::string(kQwen3Dir) + "/tokenizer.json");
  const nlohmann::json root = nlohmann::json::parse(in);
  std::vector<std::string> tokens(kNumPaddedVocab);
  std::vector<int32_t> types(kNumPaddedVocab, 5);  // UNUSED unless set below
  for (const auto& [text, id] : root["model"]["vocab"].items()) {
    tokens[id.get<int32_t>()] = text;
    types[id.get<int32_t>()] = 1;
  }
  for (const auto& a : root["added_tokens"]) {
    const int32_t id = a["id"].get<int32_t>();
    tokens[id] = a["content"].get<std::string>();
    types[id] = a["special"].get<bool>() ? 3 : 4;
  }
  for (int32_t id = 0; id < kNumPaddedVocab; ++id) {
    if (tokens[id].empty()) tokens[id] = "[PAD" + std::to_string(id) + "]";
  }
  std::vector<std::string> merges;
  for (const auto& m : root["model"]["merges"]) {
    merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  deltaserve::testing::GgufWriter w;
  w.add_string("general.architecture", "qwen35");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", 151643);
  w.add_u32("tokenizer.ggml.eos_token_id", 151645);
  w.add_u32("tokenizer.ggml.padding_token_id", 151643);
  return w;
}

// Writes it with tokenizer.ggml.pre = `pre` and opens it.
std::unique_ptr<GgufFile> write_qwen3_gguf(const deltaserve::testing::TempDir& dir, const std::string& pre) {
  static deltaserve::testing::GgufWriter w = build_qwen3_gguf();
  w.set_string("tokenizer.ggml.pre", pre);
  const std::string path = dir.file("tok_" + pre + ".gguf");
  deltaserve::testing::write_file(path, w.build());
  return GgufFile::open(path);
}

TEST(TokenizerGguf, Qwen2PreMatchesTokenizerJsonOnTheCorpus) {
  deltaserve::testing::TempDir dir;
  const auto gguf = write_qwen3_gguf(dir, "qwen2");
  const auto tok = Tokenizer::from_gguf(*gguf);
  const Tokenizer& json_tok = qwen3_tokenizer();
  EXPECT_EQ(tok->num_vocab(), kNumPaddedVocab);
  EXPECT_EQ(tok->eos_id(), 151645);
  EXPECT_EQ(tok->bos_id(), 151643);
  EXPECT_TRUE(tok->is_special(151645));
  EXPECT_FALSE(tok->is_special(151667));
  EXPECT_EQ(tok->token_to_piece(151800), "");  // padding rows decode to nothing
  const auto corpus = read_jsonl(std::string(kQwen3Dir) + "/corpus.jsonl");
  size_t num_checked = 0;
  for (size_t i = 0; i < corpus.size(); i += 5) {
    const std::string text = corpus[i]["text"].get<std::string>();
    ASSERT_EQ(tok->encode(text), json_tok.encode(text)) << nlohmann::json(text).dump();
    ++num_checked;
  }
  EXPECT_GT(num_checked, 2000u);
}

TEST(TokenizerGguf, Qwen35PreKeepsCombiningMarksWithLetters) {
  deltaserve::testing::TempDir dir;
  const auto qwen35 = Tokenizer::from_gguf(*write_qwen3_gguf(dir, "qwen35"));
  const auto qwen2 = Tokenizer::from_gguf(*write_qwen3_gguf(dir, "qwen2"));
  // Devanagari KA + vowel sign I (a spacing mark, \p{Mc}): one word for qwen35, two for qwen2.
  const std::string text = "\xE0\xA4\x95\xE0\xA4\xBF";
  std::vector<std::string_view> pieces;
  qwen35->splitter()->split(text, pieces);
  EXPECT_EQ(pieces.size(), 1u);
  pieces.clear();
  qwen2->splitter()->split(text, pieces);
  EXPECT_EQ(pieces.size(), 2u);
}

TEST(TokenizerGguf, UnsupportedModelIsRejected) {
  deltaserve::testing::TempDir dir;
  deltaserve::testing::GgufWriter w;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", {"a"});
  deltaserve::testing::write_file(dir.file("spm.gguf"), w.build());
  const auto gguf = GgufFile::open(dir.file("spm.gguf"));
  EXPECT_THROW(Tokenizer::from_gguf(*gguf), TokenizerError);
}

// A small byte-level vocabulary: the 256 byte tokens (GPT-2's byte-to-unicode strings),
// "ab" (256), then <|endoftext|> (257, control); `types` overrides some token types.
deltaserve::testing::GgufWriter small_vocab(const std::vector<std::pair<size_t, int32_t>>& types,
                                            std::vector<std::string> merges) {
  std::vector<std::string> tokens;
  int32_t next_free = 256;
  for (int32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next_free++);
    std::string utf8;
    if (cp < 0x80) {
      utf8 += static_cast<char>(cp);
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    tokens.push_back(utf8);
  }
  tokens.push_back("ab");
  tokens.push_back("<|endoftext|>");
  std::vector<int32_t> type_ids(tokens.size(), 1);
  type_ids.back() = 3;
  for (const auto& [id, type] : types) type_ids[id] = type;
  deltaserve::testing::GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", type_ids);
  w.add_string_array("tokenizer.ggml.merges", merges);
  return w;
}

std::string load_error(const deltaserve::testing::TempDir& dir, const std::string& name,
                       const deltaserve::testing::GgufWriter& w) {
  const std::string path = dir.file(name);
  deltaserve::testing::write_file(path, w.build());
  try {
    (void)Tokenizer::from_gguf(*GgufFile::open(path));
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerGguf, AMalformedMergeNamesTheFileAndTheMerge) {
  deltaserve::testing::TempDir dir;
  const std::string error = load_error(dir, "bad_merge.gguf", small_vocab({}, {"a b", "abc"}));
  EXPECT_NE(error.find("bad_merge.gguf"), std::string::npos) << error;
  EXPECT_NE(error.find("tokenizer.ggml.merges"), std::string::npos) << error;
  EXPECT_NE(error.find("merge #1 \"abc\""), std::string::npos) << error;
}

TEST(TokenizerGguf, AnOutOfRangeTokenTypeIsRejected) {
  deltaserve::testing::TempDir dir;
  for (int32_t type : {7, -1, 99}) {
    const std::string error = load_error(dir, "bad_type.gguf", small_vocab({{1, type}}, {"a b"}));
    EXPECT_NE(error.find("bad_type.gguf"), std::string::npos) << error;
    EXPECT_NE(error.find("token_type[1]"), std::string::npos) << error;
  }
  EXPECT_EQ(load_error(dir, "good.gguf", small_vocab({{1, 6}, {256, 0}}, {"a b"})), "");
}

TEST(TokenizerGguf, AddBosTokenComesFromTheMetadata) {
  deltaserve::testing::TempDir dir;
  for (const std::optional<bool> flag : {std::optional<bool>(), std::optional<bool>(false), std::optional<bool>(true)}) {
    deltaserve::testing::GgufWriter w = small_vocab({}, {"a b"});
    w.add_u32("tokenizer.ggml.bos_token_id", 257);
    if (flag) w.add_bool("tokenizer.ggml.add_bos_token", *flag);
    const std::string path = dir.file("bos.gguf");
    deltaserve::testing::write_file(path, w.build());
    const auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
    EXPECT_EQ(tok->bos_id(), 257);
    EXPECT_EQ(tok->add_bos_token(), flag.value_or(false));
  }
}

TEST(TokenizerJson, AMalformedMergeIsNamed) {
  const std::string json = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b","abc"]}})";
  try {
    (void)Tokenizer::from_json_string(json);
    FAIL() << "loaded";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("model.merges: merge #1 \"abc\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltaserve::runtime
