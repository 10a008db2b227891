// Response shapes and SSE framing, as the official clients parse them.
#include <gtest/gtest.h>

#include <limits>

#include "server/fake_text_codec.h"
#include "server/openai_response.h"
#include "server/wire_format.h"

namespace deltaserve::server {
namespace {

const FakeTextCodec kCodec;

ResponseFormatter formatter(Endpoint endpoint, bool usage_nulls = false) {
  ResponseFormatter::Setup s;
  s.endpoint = endpoint;
  s.id = endpoint == Endpoint::Chat ? "chatcmpl-x" : "cmpl-x";
  s.created = 1700000000;
  s.model = "tiny";
  s.usage_null_in_chunks = usage_nulls;
  return ResponseFormatter(s, kCodec);
}

TEST(SseFraming, EventsAreDataLinesWithABlankLine) {
  EXPECT_EQ(sse_event(nlohmann::json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 never throws: it is replaced.
  EXPECT_EQ(sse_event(nlohmann::json{{"t", std::string("\xFF")}}), "data: {\"t\":\"\xEF\xBF\xBD\"}\n\n");
  // A newline inside content is escaped: one event is always one data line.
  EXPECT_EQ(sse_event(nlohmann::json{{"t", "a\nb"}}).find('\n'), sse_event(nlohmann::json{{"t", "a\nb"}}).size() - 2);
}

TEST(ChatChunks, RoleDeltaFinishUsage) {
  const ResponseFormatter f = formatter(Endpoint::Chat, true);
  const nlohmann::json role = f.role_chunk();
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-x");
  EXPECT_EQ(role["created"], 1700000000);
  EXPECT_EQ(role["model"], "tiny");
  EXPECT_EQ(role["choices"][0]["index"], 0);
  EXPECT_EQ(role["choices"][0]["delta"], (nlohmann::json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());

  OutputDelta d;
  d.reasoning = "think";
  const nlohmann::json r = f.delta_chunk(d);
  EXPECT_EQ(r["choices"][0]["delta"], (nlohmann::json{{"reasoning_content", "think"}}));
  d.reasoning.clear();
  d.content = "hi";
  EXPECT_EQ(f.delta_chunk(d)["choices"][0]["delta"], (nlohmann::json{{"content", "hi"}}));

  const nlohmann::json fin = f.finish_chunk("length");
  EXPECT_EQ(fin["choices"][0]["delta"], nlohmann::json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");

  const nlohmann::json u = f.usage_chunk({5, 3, 1});
  EXPECT_EQ(u["choices"], nlohmann::json::array());
  EXPECT_EQ(u["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(u["usage"]["completion_tokens"], 3);
  EXPECT_EQ(u["usage"]["total_tokens"], 8);
  EXPECT_EQ(u["usage"]["completion_tokens_details"]["reasoning_tokens"], 1);
}

TEST(ChatChunks, ReasoningFieldChoice) {
  ResponseFormatter::Setup s;
  s.reasoning_field = ReasoningField::Both;
  const ResponseFormatter both(s, kCodec);
  OutputDelta d;
  d.reasoning = "r";
  const nlohmann::json delta = both.delta_chunk(d)["choices"][0]["delta"];
  EXPECT_EQ(delta["reasoning"], "r");
  EXPECT_EQ(delta["reasoning_content"], "r");
  s.reasoning_field = ReasoningField::Reasoning;
  EXPECT_FALSE(ResponseFormatter(s, kCodec).delta_chunk(d)["choices"][0]["delta"].contains("reasoning_content"));
}

TEST(FinalBodies, ChatAndCompletion) {
  OutputDelta all;
  all.content = "answer";
  all.reasoning = "why";
  const nlohmann::json chat = formatter(Endpoint::Chat).final_body(all, "stop", {4, 2, 0});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "answer");
  EXPECT_EQ(chat["choices"][0]["message"]["reasoning_content"], "why");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chat["usage"]["total_tokens"], 6);

  const nlohmann::json text = formatter(Endpoint::Completion).final_body(all, "length", {4, 2, 0});
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "answer");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "length");
  const nlohmann::json chunk = formatter(Endpoint::Completion).finish_chunk("stop");
  EXPECT_EQ(chunk["choices"][0]["text"], "");
}

TEST(FinalBodies, Logprobs) {
  ResponseFormatter::Setup s;
  s.logprobs = true;
  OutputDelta all;
  all.content = "ab";
  all.logprobs = {{'a', -0.5f, {{'a', -0.5f}, {'b', -1.0f}}}, {'b', -0.25f, {}}};
  const nlohmann::json chat = ResponseFormatter(s, kCodec).final_body(all, "stop", {});
  const nlohmann::json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "a");
  EXPECT_EQ(content[0]["bytes"], nlohmann::json::array({97}));
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  s.endpoint = Endpoint::Completion;
  const nlohmann::json text = ResponseFormatter(s, kCodec).final_body(all, "stop", {});
  EXPECT_EQ(text["choices"][0]["logprobs"]["tokens"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(text["choices"][0]["logprobs"]["text_offset"], nlohmann::json::array({0, 1}));
}

TEST(FinalBodies, TopLogprobsLeaveOutTokensTheConstraintRefuses) {
  // A constrained position with one allowed token: the others have logprob -inf, which JSON
  // cannot carry (it became null); they are left out, so every logprob is a number.
  ResponseFormatter::Setup s;
  s.logprobs = true;
  OutputDelta all;
  all.content = "a";
  const float inf = std::numeric_limits<float>::infinity();
  all.logprobs = {{'a', 0.0f, {{'a', 0.0f}, {'b', -inf}, {'c', -inf}}}};
  const nlohmann::json chat = ResponseFormatter(s, kCodec).final_body(all, "stop", {});
  const nlohmann::json& top = chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0]["token"], "a");
  EXPECT_EQ(top[0]["logprob"], 0.0);
  s.endpoint = Endpoint::Completion;
  const nlohmann::json text = ResponseFormatter(s, kCodec).final_body(all, "stop", {});
  EXPECT_EQ(text["choices"][0]["logprobs"]["top_logprobs"][0], (nlohmann::json{{"a", 0.0}}));
}

TEST(CompletionChunks, StreamedTextOffsetsRunOnAcrossChunks) {
  // As the non-streamed body's: each token's offset in the whole text, not in its chunk.
  ResponseFormatter::Setup s;
  s.endpoint = Endpoint::Completion;
  s.logprobs = true;
  OpenAiWire wire(s, kCodec, /*include_usage=*/false, /*continuous_usage=*/false);
  std::vector<nlohmann::json> offsets;
  for (const std::string text : {"ab", "c", "de"}) {
    OutputDelta d;
    d.content = text;
    for (const char ch : text) d.logprobs.push_back({ch, -0.5f, {}});
    const std::string event = wire.stream_delta(d, {});
    const nlohmann::json chunk = nlohmann::json::parse(event.substr(6));  // after "data: "
    offsets.push_back(chunk["choices"][0]["logprobs"]["text_offset"]);
  }
  EXPECT_EQ(offsets[0], nlohmann::json::array({0, 1}));
  EXPECT_EQ(offsets[1], nlohmann::json::array({2}));
  EXPECT_EQ(offsets[2], nlohmann::json::array({3, 4}));
}

// OpenAI and vLLM count text_offset in characters of the text, not bytes. The fake codec's
// tokens are single bytes, so "aé€b" is 7 tokens: é and € are split across tokens. A token
// that ends inside a character has not finished it; the token that does starts at it.
TEST(CompletionLogprobs, TextOffsetCountsCharactersNotBytes) {
  ResponseFormatter::Setup s;
  s.endpoint = Endpoint::Completion;
  s.logprobs = true;
  const std::string text = "a\xC3\xA9\xE2\x82\xAC" "b";
  OutputDelta all;
  all.content = text;
  for (const char ch : text) all.logprobs.push_back({static_cast<unsigned char>(ch), -0.5f, {}});
  const nlohmann::json body = ResponseFormatter(s, kCodec).final_body(all, "stop", {});
  const nlohmann::json expected = nlohmann::json::array({0, 1, 1, 2, 2, 2, 3});
  EXPECT_EQ(body["choices"][0]["logprobs"]["text_offset"], expected);

  // Streamed with a chunk boundary inside é and one inside €: the same offsets.
  OpenAiWire wire(s, kCodec, /*include_usage=*/false, /*continuous_usage=*/false);
  nlohmann::json streamed = nlohmann::json::array();
  for (const auto& [from, n] : {std::pair{0, 2}, std::pair{2, 2}, std::pair{4, 3}}) {
    OutputDelta d;
    d.logprobs.assign(all.logprobs.begin() + from, all.logprobs.begin() + from + n);
    d.content = "x";
    const nlohmann::json chunk = nlohmann::json::parse(wire.stream_delta(d, {}).substr(6));
    for (const auto& offset : chunk["choices"][0]["logprobs"]["text_offset"]) streamed.push_back(offset);
  }
  EXPECT_EQ(streamed, expected);
}

TEST(Utf8CharCounter, SplitCharactersCountOnceAndInvalidBytesAsReplacements) {
  Utf8CharCounter c;
  c.push("\xF0\x9F");  // half of U+1F600
  EXPECT_EQ(c.chars(), 0u);
  c.push("\x98\x80z");
  EXPECT_EQ(c.chars(), 2u);
  c.push("\xFF");       // never valid: one U+FFFD
  EXPECT_EQ(c.chars(), 3u);
  c.push("\xC3");       // a lead byte that a letter then breaks: one U+FFFD, then the letter
  c.push("q");
  EXPECT_EQ(c.chars(), 5u);
}

}  // namespace
}  // namespace deltaserve::server
