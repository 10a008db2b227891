// StopStringMatcher: stop strings split across two and three tokens, held-back text
// released when it cannot start a stop string, never emitted after a match.
#include "runtime/stop_string_matcher.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/streaming_detokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace deltaserve::runtime {
namespace {

struct StreamResult {
  std::string text;
  bool stopped = false;
  int32_t stop_index = -1;
};

StreamResult run_chunks(const std::vector<std::string>& stops, const std::vector<std::string>& chunks) {
  StopStringMatcher m(stops);
  StreamResult r;
  for (const auto& c : chunks) {
    auto out = m.feed(c);
    r.text += out.text;
    if (out.stopped) {
      r.stopped = true;
      r.stop_index = out.stop_index;
    }
  }
  r.text += m.flush();
  return r;
}

TEST(StopStringMatcher, EverySplitIntoTwoAndThreeTokens) {
  const std::string text = "The answer: 42 STOP and more";
  const std::vector<std::string> stops = {"STOP"};
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const StreamResult two = run_chunks(stops, {text.substr(0, j), text.substr(j)});
      EXPECT_TRUE(two.stopped);
      EXPECT_EQ(two.text, "The answer: 42 ");
      const StreamResult three = run_chunks(stops, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
      EXPECT_TRUE(three.stopped) << i << "," << j;
      EXPECT_EQ(three.text, "The answer: 42 ") << i << "," << j;
    }
  }
}

TEST(StopStringMatcher, HoldsOnlyWhatCouldStartAStop) {
  StopStringMatcher m({"</done>"});
  EXPECT_EQ(m.feed("abc </do").text, "abc ");
  EXPECT_EQ(m.num_held_bytes(), 4u);
  EXPECT_EQ(m.feed("g>").text, "</dog>");  // not a stop after all: released
  EXPECT_EQ(m.num_held_bytes(), 0u);
  EXPECT_EQ(m.feed("x<").text, "x");
  EXPECT_EQ(m.flush(), "<");  // end of generation: the held text is released
}

TEST(StopStringMatcher, OverlappingFalseStartsAndEarliestMatch) {
  // "abcabd" first occurs at offset 3 of "abcabcabd".
  std::vector<std::string> chars;
  for (char c : std::string("abcabcabd tail")) chars.push_back(std::string(1, c));
  const StreamResult r = run_chunks({"abcabd"}, chars);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "abc");
  // Two stop strings: the one that starts first wins, whatever the list order.
  const StreamResult both = run_chunks({"world", "lo w"}, {"hello world"});
  EXPECT_EQ(both.text, "hel");
  EXPECT_EQ(both.stop_index, 1);
}

TEST(StopStringMatcher, EarliestStartWinsOverEarliestEnd) {
  // "b" is held (it could start "bcd"); then "cd" completes first but "bcd" starts earlier.
  StopStringMatcher m({"cd", "bcd"});
  EXPECT_EQ(m.feed("ab").text, "a");
  const auto out = m.feed("cde");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.stop_index, 1);
  EXPECT_EQ(out.text, "");
}

TEST(StopStringMatcher, NothingAfterAStopAndEmptyStopsIgnored) {
  StopStringMatcher m({"", "X"});
  auto out = m.feed("aXb");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "a");
  EXPECT_EQ(out.stop_index, 1);
  EXPECT_EQ(m.feed("more").text, "");
  EXPECT_EQ(m.flush(), "");
  StopStringMatcher none({""});
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.feed("text").text, "text");
}

TEST(StopStringMatcher, WithRealTokensAcrossTokenBoundaries) {
  const Tokenizer& tok = tokenizer_testing::qwen3_tokenizer();
  const std::string text = "Thought: sum it up.\nObservation: 42 apples\n";
  const std::vector<int32_t> ids = tok.encode(text);
  const std::string stop = "\nObservation:";
  // The stop string really spans several tokens.
  for (int32_t id : ids) ASSERT_EQ(std::string(tok.token_to_piece(id)).find(stop), std::string::npos);
  StreamingDetokenizer detok(tok, true);
  StopStringMatcher m({stop});
  std::string emitted;
  bool stopped = false;
  for (int32_t id : ids) {
    auto out = m.feed(detok.feed(id));
    emitted += out.text;
    if (out.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(emitted, "Thought: sum it up.");
}

}  // namespace
}  // namespace deltaserve::runtime
