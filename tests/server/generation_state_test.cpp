// From engine events to client output: stop strings and stop tokens inside multi-token
// events, exact usage, UTF-8 split across tokens, the think split, the token limit.
#include <gtest/gtest.h>

#include "server/fake_text_codec.h"
#include "server/generation_state.h"
#include "server/utf8.h"

namespace deltaserve::server {
namespace {

using scheduler::FinishReason;
using scheduler::RequestEvent;

const FakeTextCodec kCodec;

std::vector<int32_t> ids(const std::string& text) { return kCodec.encode(text, false); }

RequestEvent event(std::vector<int32_t> tokens, FinishReason finish = FinishReason::None) {
  RequestEvent e;
  e.id = 1;
  e.tokens = std::move(tokens);
  e.finish = finish;
  return e;
}

GenerationSetup setup() {
  GenerationSetup s;
  s.num_prompt_tokens = 7;
  s.max_tokens = 100;
  s.stop_token_ids = kCodec.eos_token_ids();
  return s;
}

// Feeds `text` as events of `per_event` tokens; returns content and the final output.
std::pair<std::string, StepOutput> run(GenerationState& g, const std::string& text, size_t per_event,
                                       FinishReason last = FinishReason::None) {
  std::string content;
  StepOutput out;
  const std::vector<int32_t> all = ids(text);
  for (size_t i = 0; i < all.size() && !g.done(); i += per_event) {
    const size_t end = std::min(all.size(), i + per_event);
    out = g.on_event(event({all.begin() + i, all.begin() + end}, end == all.size() ? last : FinishReason::None));
    content += out.delta.content;
  }
  return {content, out};
}

TEST(GenerationState, StopStringInsideAMultiTokenEvent) {
  for (size_t per_event = 1; per_event <= 6; ++per_event) {
    GenerationSetup s = setup();
    s.stop = {"STOP"};
    GenerationState g(kCodec, s);
    auto [content, out] = run(g, "hello STOP tail", per_event);
    EXPECT_EQ(content, "hello ") << per_event;
    ASSERT_NE(out.finish_reason, nullptr);
    EXPECT_STREQ(out.finish_reason, "stop");
    EXPECT_TRUE(out.cancel_engine);
    // Counted: the tokens up to and including the one that completed "STOP".
    EXPECT_EQ(g.usage().num_completion_tokens, 10) << per_event;
    EXPECT_EQ(g.usage().num_prompt_tokens, 7);
  }
}

TEST(GenerationState, IncludeStopString) {
  GenerationSetup s = setup();
  s.stop = {"ST"};
  s.include_stop_in_output = true;
  GenerationState g(kCodec, s);
  EXPECT_EQ(run(g, "abSTcd", 3).first, "abST");
}

TEST(GenerationState, HeldPrefixIsReleasedAtTheEnd) {
  GenerationSetup s = setup();
  s.stop = {"STOP"};
  GenerationState g(kCodec, s);
  auto [content, out] = run(g, "abc ST", 2, FinishReason::Length);
  EXPECT_EQ(content, "abc ST");
  EXPECT_STREQ(out.finish_reason, "length");
  EXPECT_FALSE(out.cancel_engine);
}

TEST(GenerationState, StopTokenIsCountedNotShown) {
  GenerationState g(kCodec, setup());
  std::vector<int32_t> tokens = ids("ok");
  tokens.push_back(FakeTextCodec::kImEnd);
  tokens.push_back('x');  // an accepted draft past the stop: neither shown nor counted
  const StepOutput out = g.on_event(event(tokens));
  EXPECT_EQ(out.delta.content, "ok");
  EXPECT_STREQ(out.finish_reason, "stop");
  EXPECT_EQ(g.usage().num_completion_tokens, 3);
}

TEST(GenerationState, TokenLimitCutsAnAcceptedBlock) {
  GenerationSetup s = setup();
  s.max_tokens = 3;
  GenerationState g(kCodec, s);
  const StepOutput out = g.on_event(event(ids("abcdef")));
  EXPECT_EQ(out.delta.content, "abc");
  EXPECT_STREQ(out.finish_reason, "length");
  EXPECT_TRUE(out.cancel_engine);
  EXPECT_EQ(g.usage().num_completion_tokens, 3);
}

TEST(GenerationState, Utf8CharacterSplitAcrossTokensAndEvents) {
  GenerationState g(kCodec, setup());
  const std::vector<int32_t> t = ids("é€");  // 2 + 3 bytes, one token per byte
  std::string content;
  for (int32_t token : t) {
    const StepOutput out = g.on_event(event({token}));
    EXPECT_EQ(sanitize_utf8(out.delta.content), out.delta.content) << "partial character leaked";
    content += out.delta.content;
  }
  EXPECT_EQ(content, "é€");
}

TEST(GenerationState, ReasoningSplitAndReasoningTokens) {
  GenerationSetup s = setup();
  s.split_reasoning = true;
  s.starts_in_reasoning = true;
  GenerationState g(kCodec, s);
  std::vector<int32_t> tokens = ids("hmm</think>\n\nyes");
  tokens.push_back(FakeTextCodec::kImEnd);
  const StepOutput out = g.on_event(event(tokens, FinishReason::Stop));
  EXPECT_EQ(out.delta.reasoning, "hmm");
  EXPECT_EQ(out.delta.content, "yes");
  EXPECT_EQ(g.usage().num_reasoning_tokens, 4);  // h m m </think>
  EXPECT_EQ(g.usage().num_completion_tokens, static_cast<int32_t>(tokens.size()));
  EXPECT_LE(g.usage().num_reasoning_tokens, g.usage().num_completion_tokens);
}

TEST(GenerationState, EngineErrorAndCancellation) {
  GenerationState g(kCodec, setup());
  RequestEvent e = event(ids("a"), FinishReason::Error);
  e.error = "device lost";
  const StepOutput out = g.on_event(e);
  EXPECT_EQ(out.delta.content, "a");
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(*out.error, "device lost");
  EXPECT_TRUE(g.done());
  EXPECT_FALSE(g.on_event(event(ids("b"))).done());  // ignored after the end

  GenerationState c(kCodec, setup());
  EXPECT_TRUE(c.on_event(event({}, FinishReason::Cancelled)).error.has_value());
}

TEST(Utf8, CompletePrefixAndSanitize) {
  EXPECT_EQ(utf8_complete_prefix("ab\xC3"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);  // invalid: emitted (and replaced)
  EXPECT_EQ(sanitize_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

}  // namespace
}  // namespace deltaserve::server
