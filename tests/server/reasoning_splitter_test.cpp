// The <think> split must not depend on how the text is cut into pieces.
#include <gtest/gtest.h>

#include "server/reasoning_splitter.h"

namespace deltaserve::server {
namespace {

// Runs `text` through a splitter in pieces of `piece` bytes (0 = one piece).
ReasoningSplitter::Pieces split(const std::string& text, bool starts_inside, size_t piece) {
  ReasoningSplitter s(starts_inside);
  ReasoningSplitter::Pieces all;
  const size_t step = piece == 0 ? text.size() : piece;
  for (size_t i = 0; i < text.size(); i += step) {
    const ReasoningSplitter::Pieces p = s.push(std::string_view(text).substr(i, step));
    all.reasoning += p.reasoning;
    all.content += p.content;
  }
  const ReasoningSplitter::Pieces tail = s.finish();
  all.reasoning += tail.reasoning;
  all.content += tail.content;
  return all;
}

struct Case {
  std::string text;
  bool starts_inside;
  std::string reasoning;
  std::string content;
};

class SplitAtEveryCut : public ::testing::TestWithParam<Case> {};

TEST_P(SplitAtEveryCut, SameResultForEveryPieceSize) {
  const Case& c = GetParam();
  for (size_t piece = 0; piece <= c.text.size(); ++piece) {
    const ReasoningSplitter::Pieces p = split(c.text, c.starts_inside, piece);
    EXPECT_EQ(p.reasoning, c.reasoning) << "piece " << piece << " of '" << c.text << "'";
    EXPECT_EQ(p.content, c.content) << "piece " << piece << " of '" << c.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Texts, SplitAtEveryCut,
    ::testing::Values(
        Case{"<think>\nplan it\n</think>\n\nThe answer.", false, "plan it", "The answer."},
        // Qwen3.5 with enable_thinking: the template already opened the block.
        Case{"plan it\n</think>\n\nThe answer.", true, "plan it", "The answer."},
        Case{"no thinking here", false, "", "no thinking here"},
        Case{"still thinking", true, "still thinking", ""},
        Case{"a < b and </thin but not a tag", false, "", "a < b and </thin but not a tag"},
        Case{"x <thin y", true, "x <thin y", ""},
        Case{"line1\n\nline2\n</think>ok\n", true, "line1\n\nline2", "ok\n"},
        Case{"<think></think>\n\nanswer", false, "", "answer"},
        Case{"trailing newlines in reasoning\n\n", true, "trailing newlines in reasoning\n\n", ""},
        // Cut by max_tokens inside the close tag: nothing of the tag, nor the newline before
        // it, is reasoning. A lone "<" could be text and stays.
        Case{"The user\n</think", true, "The user", ""},
        Case{"The user\n\n</", true, "The user", ""},
        Case{"a <", true, "a <", ""},
        Case{"héllo → wörld</think>日本", true, "héllo → wörld", "日本"}));

TEST(ReasoningSplitter, PromptEndsInReasoning) {
  EXPECT_TRUE(ReasoningSplitter::prompt_ends_in_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ReasoningSplitter::prompt_ends_in_reasoning(
      "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ReasoningSplitter::prompt_ends_in_reasoning("<|im_start|>assistant\n"));
  // An earlier turn's closed block does not count.
  EXPECT_FALSE(ReasoningSplitter::prompt_ends_in_reasoning("<think>a</think>b<|im_start|>assistant\n"));
}

TEST(ReasoningSplitter, NothingOfATagLeaksWhileHeld) {
  ReasoningSplitter s(true);
  EXPECT_EQ(s.push("abc</th").reasoning, "abc");
  const ReasoningSplitter::Pieces p = s.push("ink>def");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "def");
  EXPECT_FALSE(s.in_reasoning());
}

}  // namespace
}  // namespace deltaserve::server
