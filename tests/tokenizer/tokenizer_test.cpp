// Unit tests of the tokenizer on the real Qwen3 vocabulary: known ids, added and special
// tokens, ill-formed UTF-8, NFC, long words, threads and load errors.
#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/tokenizer/unicode_nfc.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace deltaserve::runtime {
namespace {

using tokenizer_testing::kQwen3Dir;
using tokenizer_testing::qwen3_tokenizer;
using Ids = std::vector<int32_t>;

std::string pieces_of(const Tokenizer& tok, const Ids& ids) {
  std::string out;
  for (int32_t id : ids) out.append(tok.token_to_piece(id));
  return out;
}

TEST(Tokenizer, KnownIds) {
  const Tokenizer& tok = qwen3_tokenizer();
  EXPECT_EQ(tok.encode("Hello, world!"), (Ids{9707, 11, 1879, 0}));
  EXPECT_EQ(tok.encode("<|im_start|>user\nhi<|im_end|>\n"), (Ids{151644, 872, 198, 6023, 151645, 198}));
  EXPECT_EQ(tok.encode("<think>\n\n</think>\n\n"), (Ids{151667, 271, 151668, 271}));
  EXPECT_EQ(tok.encode("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C"),
            (Ids{108386, 3837, 99489}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Tokenizer, SpecialTokenLookupAndFlags) {
  const Tokenizer& tok = qwen3_tokenizer();
  EXPECT_EQ(tok.num_vocab(), 151669);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.token_id("<think>"), 151667);
  EXPECT_EQ(tok.token_id("Hello"), 9707);
  EXPECT_EQ(tok.token_id("no such token at all"), std::nullopt);
  EXPECT_EQ(tok.eos_id(), 151645);  // tokenizer_config.json: eos_token <|im_end|>
  EXPECT_EQ(tok.pad_id(), 151643);
  EXPECT_EQ(tok.bos_id(), std::nullopt);
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is a normal added token
  EXPECT_TRUE(tok.is_added(151667));
  EXPECT_FALSE(tok.is_special(9707));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(1 << 30));
  EXPECT_EQ(tok.token_to_piece(151645), "<|im_end|>");
  EXPECT_EQ(tok.token_to_piece(220), " ");
  EXPECT_EQ(tok.token_to_piece(-5), "");
}

TEST(Tokenizer, ParseSpecialOffKeepsSpecialTokensAsText) {
  const Tokenizer& tok = qwen3_tokenizer();
  const std::string text = "a<|im_end|>b<think>c";
  const Ids ids = tok.encode(text, /*parse_special=*/false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151667), 1);  // normal added tokens still match
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(Tokenizer, DecodeSkipsSpecialTokensOnRequest) {
  const Tokenizer& tok = qwen3_tokenizer();
  const Ids ids = {151644, 9707, 151645, 151667};
  EXPECT_EQ(tok.decode(ids), "<|im_start|>Hello<|im_end|><think>");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "Hello<think>");
  EXPECT_EQ(tok.decode(Ids{-1, 9707, 999999999}), "Hello");
}

TEST(Tokenizer, IllFormedUtf8RoundTripsAtTheByteLevel) {
  const Tokenizer& tok = qwen3_tokenizer();
  const std::string text = "ok \xFF\xFE abc \xE4\xBD truncated \xED\xA0\x80 surrogate \xC0\xAF end\xF0\x9F";
  const Ids ids = tok.encode(text);
  EXPECT_EQ(pieces_of(tok, ids), text);
  const std::string decoded = tok.decode(ids);
  EXPECT_NE(decoded.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(decoded.find('\xFF'), std::string::npos);
}

TEST(Tokenizer, NormalisesToNfc) {
  const Tokenizer& tok = qwen3_tokenizer();
  EXPECT_EQ(tok.encode("caf" "e\xCC\x81"), tok.encode("caf\xC3\xA9"));  // e + U+0301 -> U+00E9
  EXPECT_EQ(tok.decode(tok.encode("\xE2\x84\xAB")), "\xC3\x85");        // U+212B -> U+00C5
  EXPECT_EQ(nfc::normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> U+AC01
  EXPECT_EQ(nfc::normalize("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");  // reorder, then compose
  EXPECT_TRUE(nfc::is_quick_nfc("plain ascii and \xC3\xA9 and \xE4\xBD\xA0"));
  EXPECT_FALSE(nfc::is_quick_nfc("e\xCC\x81"));
}

TEST(Tokenizer, LongWordsRoundTrip) {
  const Tokenizer& tok = qwen3_tokenizer();
  for (size_t n : {95u, 96u, 97u, 200u, 5000u}) {
    const std::string word(n, 'a');
    EXPECT_EQ(pieces_of(tok, tok.encode(word)), word) << n;
  }
  EXPECT_LT(tok.encode(std::string(100000, ' ')).size(), 100000u / 8);
}

// Words up to 96 bytes merge by scanning, longer ones with a heap: both must apply the
// lowest rank first and the leftmost pair among equals. With merges (a a) then (aa aa), n
// letters 'a' give n/4 "aaaa" tokens plus the remainder, whichever path runs.
TEST(Tokenizer, ShortAndLongMergePathsAgree) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.model_tokens.push_back(std::string(1, static_cast<char>(b)));
  spec.model_tokens.push_back("aa");    // 256
  spec.model_tokens.push_back("aaaa");  // 257
  spec.merges = {{"a", "a"}, {"aa", "aa"}};
  const auto tok = Tokenizer::from_spec(spec);
  for (size_t n : {5u, 94u, 95u, 96u, 97u, 98u, 99u, 1001u, 4096u}) {
    Ids expected(n / 4, 257);
    if (n % 4 >= 2) expected.push_back(256);
    if (n % 2 == 1) expected.push_back('a');
    EXPECT_EQ(tok->encode(std::string(n, 'a')), expected) << n;
  }
}

TEST(Tokenizer, ConcurrentEncodesAgreeWithSerial) {
  const Tokenizer& tok = qwen3_tokenizer();
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    texts.push_back("request " + std::to_string(i * 7919) + " says hello\xE4\xBD\xA0 " +
                    std::string(static_cast<size_t>(i % 13), 'z') + "<|im_end|>");
  }
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(tok.encode(t));
  std::vector<std::vector<Ids>> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        results[t].clear();
        for (const auto& text : texts) results[t].push_back(tok.encode(text));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, serial);
}

TEST(Tokenizer, LoadErrorsAreClear) {
  EXPECT_THROW(Tokenizer::from_json_string("{not json"), TokenizerError);
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "Unigram"}})"), TokenizerError);
  EXPECT_THROW(Tokenizer::from_json_file("tests/fixtures/does_not_exist.json"), TokenizerError);
  try {
    Tokenizer::from_json_string(
        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
    FAIL() << "a vocabulary without all 256 bytes must be rejected";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos) << e.what();
  }
}

// A tiny hand-made byte-level vocabulary: every byte, plus merges "a b" -> "ab" and
// "ab c" -> "abc", and one added token.
TEST(Tokenizer, TinySpecMergesByRank) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.model_tokens.push_back(std::string(1, static_cast<char>(b)));
  spec.model_tokens.push_back("ab");   // 256
  spec.model_tokens.push_back("abc");  // 257
  spec.model_tokens.push_back("bc");   // 258
  spec.merges = {{"a", "b"}, {"ab", "c"}, {"b", "c"}};
  spec.added_tokens.push_back({259, "<eos>", true, false, true, false, false});
  spec.split_pattern = "\\s+|\\S+";
  const auto tok = Tokenizer::from_spec(spec);
  EXPECT_EQ(tok->encode("abc"), (Ids{257}));
  EXPECT_EQ(tok->encode("bcab"), (Ids{258, 256}));
  EXPECT_EQ(tok->encode("x<eos>   y"), (Ids{'x', 259, 'y'}));  // rstrip swallows the spaces
  EXPECT_EQ(tok->num_vocab(), 260);
}

}  // namespace
}  // namespace deltaserve::runtime
