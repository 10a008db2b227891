// StreamingDetokenizer: only whole UTF-8 characters come out, the stream equals decode(),
// special tokens hidden or shown per request.
#include "runtime/tokenizer/streaming_detokenizer.h"

#include <random>

#include <gtest/gtest.h>

#include "runtime/tokenizer/utf8.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace deltaserve::runtime {
namespace {

using tokenizer_testing::qwen3_tokenizer;

int32_t byte_token(const Tokenizer& tok, std::string_view bytes) {
  auto id = tok.token_id(bytes);
  EXPECT_TRUE(id.has_value());
  return id.value_or(0);
}

TEST(StreamingDetokenizer, HoldsASplitCharacterUntilItCompletes) {
  const Tokenizer& tok = qwen3_tokenizer();
  StreamingDetokenizer detok(tok, /*skip_special=*/false);
  // U+4F60 (E4 BD A0) fed as three single-byte tokens.
  EXPECT_EQ(detok.feed(byte_token(tok, "\xE4")), "");
  EXPECT_EQ(detok.num_pending_bytes(), 1u);
  EXPECT_EQ(detok.feed(byte_token(tok, "\xBD")), "");
  EXPECT_EQ(detok.feed(byte_token(tok, "\xA0")), "\xE4\xBD\xA0");
  EXPECT_EQ(detok.num_pending_bytes(), 0u);
  EXPECT_EQ(detok.flush(), "");
}

TEST(StreamingDetokenizer, IllFormedBytesBecomeReplacementCharacters) {
  const Tokenizer& tok = qwen3_tokenizer();
  StreamingDetokenizer detok(tok, false);
  EXPECT_EQ(detok.feed(byte_token(tok, "\xE4")), "");
  // 'A' cannot continue E4: the held byte becomes U+FFFD, 'A' passes.
  EXPECT_EQ(detok.feed(byte_token(tok, "A")), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(detok.feed(byte_token(tok, "\xF0")), "");
  EXPECT_EQ(detok.feed(byte_token(tok, "\x9F")), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");  // a truncated tail at the end: one U+FFFD
  EXPECT_EQ(detok.feed(byte_token(tok, "\xFF")), "\xEF\xBF\xBD");
}

TEST(StreamingDetokenizer, SpecialTokensHiddenOrShown) {
  const Tokenizer& tok = qwen3_tokenizer();
  const std::vector<int32_t> ids = tok.encode("<|im_start|>Hi<think>x</think><|im_end|>");
  StreamingDetokenizer hidden(tok, true), shown(tok, false);
  EXPECT_EQ(hidden.feed(ids) + hidden.flush(), "Hi<think>x</think>");
  EXPECT_EQ(shown.feed(ids) + shown.flush(), "<|im_start|>Hi<think>x</think><|im_end|>");
}

TEST(StreamingDetokenizer, HiddenSpecialTokenDoesNotBreakAHeldCharacter) {
  const Tokenizer& tok = qwen3_tokenizer();
  StreamingDetokenizer detok(tok, true);
  std::string out = detok.feed(byte_token(tok, "\xE4"));
  out += detok.feed(*tok.token_id("<|im_end|>"));
  out += detok.feed(tok.encode("\xBD\xA0"));  // the rest, as whatever tokens encode gives
  EXPECT_EQ(out + detok.flush(), "\xE4\xBD\xA0");
}

// Property: over random token sequences (model, added and out-of-range ids; byte tokens
// over-represented so characters split often) every chunk is valid UTF-8 and the chunks
// concatenate to decode().
TEST(StreamingDetokenizer, RandomSequencesNeverEmitInvalidUtf8) {
  const Tokenizer& tok = qwen3_tokenizer();
  std::mt19937_64 rng(12345);
  std::vector<int32_t> byte_ids;
  for (int b = 0; b < 256; ++b) byte_ids.push_back(byte_token(tok, std::string(1, static_cast<char>(b))));
  for (int trial = 0; trial < 2000; ++trial) {
    const bool skip_special = trial % 2 == 0;
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& id : ids) {
      const uint64_t r = rng() % 10;
      if (r < 5) id = byte_ids[rng() % 256];
      else if (r < 9) id = static_cast<int32_t>(rng() % tok.num_vocab());
      else id = static_cast<int32_t>(rng() % (tok.num_vocab() + 100)) - 50;  // some invalid
    }
    StreamingDetokenizer detok(tok, skip_special);
    std::string all;
    for (int32_t id : ids) {
      const std::string chunk = detok.feed(id);
      ASSERT_TRUE(utf8::is_valid(chunk)) << "trial " << trial;
      ASSERT_LE(detok.num_pending_bytes(), 3u);
      all += chunk;
    }
    const std::string tail = detok.flush();
    ASSERT_TRUE(utf8::is_valid(tail));
    all += tail;
    ASSERT_EQ(all, tok.decode(ids, skip_special)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace deltaserve::runtime
