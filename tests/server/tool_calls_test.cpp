// Tool calls from engine events to OpenAI shapes: GenerationState routes the content
// channel through the parser (after the think split), ends with "tool_calls" on a natural
// stop, and the formatter writes message.tool_calls / delta.tool_calls.
#include <gtest/gtest.h>

#include "server/fake_text_codec.h"
#include "server/generation_state.h"
#include "server/openai_response.h"

namespace deltaserve::server {
namespace {

using scheduler::FinishReason;
using scheduler::RequestEvent;

const FakeTextCodec kCodec;

const std::string kCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";

GenerationSetup setup(bool tools) {
  GenerationSetup s;
  s.num_prompt_tokens = 5;
  s.max_tokens = 1000;
  s.stop_token_ids = kCodec.eos_token_ids();
  s.parse_tool_calls = tools;
  s.tool_param_types = tool_param_types(RequestJson::parse(
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
          "properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}])"));
  return s;
}

// Feeds `text` then EOS (or the engine's `last` finish) in events of `per_event` tokens;
// returns everything shown and the last output.
std::pair<OutputDelta, StepOutput> run(GenerationState& g, const std::string& text, size_t per_event,
                                       bool eos = true, FinishReason last = FinishReason::None) {
  std::vector<int32_t> all = kCodec.encode(text, false);
  if (eos) all.push_back(FakeTextCodec::kImEnd);
  OutputDelta shown;
  StepOutput out;
  for (size_t i = 0; i < all.size() && !g.done(); i += per_event) {
    const size_t end = std::min(all.size(), i + per_event);
    RequestEvent e;
    e.id = 1;
    e.tokens.assign(all.begin() + i, all.begin() + end);
    if (end == all.size()) e.finish = last;
    out = g.on_event(e);
    for (size_t d = 0; d <= out.more.size(); ++d) {
      const OutputDelta& delta = d == 0 ? out.delta : out.more[d - 1];
      shown.reasoning += delta.reasoning;
      shown.content += delta.content;
      for (const ToolCall& piece : delta.tool_calls) append_call_piece(shown.tool_calls, piece);
    }
  }
  return {shown, out};
}

TEST(ToolCalls, ParsedFromContentWithFinishReasonToolCalls) {
  for (size_t per_event = 1; per_event <= 5; ++per_event) {
    GenerationState g(kCodec, setup(true));
    auto [shown, out] = run(g, "Checking.\n\n" + kCall, per_event);
    EXPECT_EQ(shown.content, "Checking.");
    ASSERT_EQ(shown.tool_calls.size(), 1u);
    EXPECT_EQ(shown.tool_calls[0].name, "get_weather");
    EXPECT_EQ(shown.tool_calls[0].arguments, R"({"city":"Paris","days":2})");
    ASSERT_NE(out.finish_reason, nullptr);
    EXPECT_STREQ(out.finish_reason, "tool_calls");
    // Usage is unchanged: every emitted token counts, the EOS too.
    EXPECT_EQ(g.usage().num_completion_tokens, static_cast<int32_t>(("Checking.\n\n" + kCall).size() + 1));
  }
}

TEST(ToolCalls, AfterTheThinkBlock) {
  GenerationSetup s = setup(true);
  s.split_reasoning = true;
  s.starts_in_reasoning = true;
  GenerationState g(kCodec, s);
  auto [shown, out] = run(g, "I should call it.\n</think>\n\n" + kCall, 3);
  EXPECT_EQ(shown.reasoning, "I should call it.");
  EXPECT_EQ(shown.content, "");
  EXPECT_EQ(shown.tool_calls.size(), 1u);
  EXPECT_STREQ(out.finish_reason, "tool_calls");
}

TEST(ToolCalls, WithoutToolsTheCallIsContent) {
  GenerationState g(kCodec, setup(false));
  auto [shown, out] = run(g, kCall, 2);
  EXPECT_EQ(shown.content, kCall);
  EXPECT_TRUE(shown.tool_calls.empty());
  EXPECT_STREQ(out.finish_reason, "stop");
}

TEST(ToolCalls, LengthCutInsideACallGivesTheTextBack) {
  GenerationSetup s = setup(true);
  s.max_tokens = 20;
  GenerationState g(kCodec, s);
  auto [shown, out] = run(g, kCall, 4, /*eos=*/false);
  EXPECT_EQ(shown.content, kCall.substr(0, 20));
  EXPECT_TRUE(shown.tool_calls.empty());
  EXPECT_STREQ(out.finish_reason, "length");
}

TEST(ToolCalls, LengthCutAfterTheNameClosesTheCall) {
  GenerationSetup s = setup(true);
  const size_t cut = kCall.find("Par") + 3;
  s.max_tokens = static_cast<int32_t>(cut);
  GenerationState g(kCodec, s);
  auto [shown, out] = run(g, kCall, 4, /*eos=*/false);
  EXPECT_EQ(shown.content, "");
  ASSERT_EQ(shown.tool_calls.size(), 1u);
  EXPECT_EQ(shown.tool_calls[0].arguments, R"({"city":"Par"})");
  EXPECT_TRUE(shown.tool_calls[0].ends);
  EXPECT_STREQ(out.finish_reason, "length");
}

// One token per event: the call starts as soon as its name is read, and its arguments grow
// with the tokens, not all at the end.
TEST(ToolCalls, ArgumentsStreamAsTheyAreGenerated) {
  GenerationState g(kCodec, setup(true));
  const std::vector<int32_t> tokens = kCodec.encode(kCall, false);
  std::string text;
  std::vector<ToolCall> calls;
  size_t started_at = 0;
  size_t city_at = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    RequestEvent e;
    e.id = 1;
    e.tokens = {tokens[i]};
    const StepOutput out = g.on_event(e);
    EXPECT_TRUE(out.more.empty());
    for (const ToolCall& piece : out.delta.tool_calls) append_call_piece(calls, piece);
    if (started_at == 0 && !calls.empty()) started_at = i + 1;
    if (city_at == 0 && !calls.empty() && calls[0].arguments.find("Pa") != std::string::npos) city_at = i + 1;
  }
  EXPECT_EQ(started_at, kCall.find("\n<parameter=city>"));  // right after "<function=get_weather>"
  EXPECT_EQ(city_at, kCall.find("Paris") + 2);            // "Pa" as soon as it was generated
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"({"city":"Paris","days":2})");
  EXPECT_TRUE(calls[0].ends);
}

// Several tokens per event: text after a call goes into a later delta of the same step, so
// the block APIs keep the model's order.
TEST(ToolCalls, TextAfterACallInOneEventOpensTheNextDelta) {
  GenerationState g(kCodec, setup(true));
  const std::vector<int32_t> tokens = kCodec.encode("Hi " + kCall + " Bye " + kCall, false);
  RequestEvent e;
  e.id = 1;
  e.tokens = tokens;
  const StepOutput out = g.on_event(e);
  EXPECT_EQ(out.delta.content, "Hi");
  ASSERT_EQ(out.delta.tool_calls.size(), 1u);
  EXPECT_TRUE(out.delta.tool_calls[0].starts && out.delta.tool_calls[0].ends);
  ASSERT_EQ(out.more.size(), 1u);
  EXPECT_EQ(out.more[0].content, "Bye");
  ASSERT_EQ(out.more[0].tool_calls.size(), 1u);
  EXPECT_EQ(out.more[0].tool_calls[0].index, 1);
}

TEST(ToolCalls, LengthAfterACallStaysLength) {
  GenerationSetup s = setup(true);
  s.max_tokens = static_cast<int32_t>(kCall.size() + 3);
  GenerationState g(kCodec, s);
  auto [shown, out] = run(g, kCall + "\nmore text", 4, /*eos=*/false);
  EXPECT_EQ(shown.tool_calls.size(), 1u);
  EXPECT_STREQ(out.finish_reason, "length");
}

TEST(ToolCalls, ParallelToolCallsFalseEndsAfterTheFirstCall) {
  // OpenAI's parallel_tool_calls false (Anthropic's disable_parallel_tool_use) with
  // tool_choice auto: at most one call; the output ends once it is closed.
  for (size_t per_event = 1; per_event <= 7; per_event += 3) {
    GenerationSetup s = setup(true);
    s.single_tool_call = true;
    GenerationState g(kCodec, s);
    auto [shown, out] = run(g, "Checking.\n" + kCall + "\n" + kCall + "\nDone.", per_event);
    EXPECT_EQ(shown.content, "Checking.");
    ASSERT_EQ(shown.tool_calls.size(), 1u) << per_event;
    EXPECT_EQ(shown.tool_calls[0].arguments, R"({"city":"Paris","days":2})");
    EXPECT_STREQ(out.finish_reason, "tool_calls");
    EXPECT_TRUE(out.cancel_engine);
    // Only the tokens up to the call's end are counted.
    EXPECT_EQ(g.usage().num_completion_tokens, static_cast<int32_t>(("Checking.\n" + kCall).size()));
  }
}

ResponseFormatter chat_formatter() {
  ResponseFormatter::Setup s;
  s.endpoint = Endpoint::Chat;
  s.id = "chatcmpl-x";
  s.model = "tiny";
  return ResponseFormatter(s, kCodec);
}

ToolCall call(int32_t index) {
  return ToolCall{index, "call_" + std::to_string(index), "get_weather", R"({"city":"Paris"})"};
}

TEST(ToolCalls, FinalBodyShape) {
  OutputDelta all;
  all.tool_calls = {call(0), call(1)};
  const nlohmann::json body = chat_formatter().final_body(all, "tool_calls", Usage{});
  const nlohmann::json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(choice["message"]["tool_calls"][1],
            (nlohmann::json{{"id", "call_1"},
                            {"type", "function"},
                            {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}));
  all.content = "Sure.";
  EXPECT_EQ(chat_formatter().final_body(all, "tool_calls", Usage{})["choices"][0]["message"]["content"], "Sure.");
  // No calls: unchanged shape (content "" not null, no tool_calls key).
  const nlohmann::json plain = chat_formatter().final_body(OutputDelta{}, "stop", Usage{});
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolCalls, DeltaChunkShape) {
  OutputDelta d;
  d.tool_calls = {call(1)};
  const nlohmann::json delta = chat_formatter().delta_chunk(d)["choices"][0]["delta"];
  EXPECT_FALSE(delta.contains("content"));
  ASSERT_EQ(delta["tool_calls"].size(), 1u);
  EXPECT_EQ(delta["tool_calls"][0]["index"], 1);
  EXPECT_EQ(delta["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(delta["tool_calls"][0]["type"], "function");
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(delta["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  d.content = "x";
  EXPECT_EQ(chat_formatter().delta_chunk(d)["choices"][0]["delta"]["content"], "x");
  // A later piece: the index and an arguments fragment only, as OpenAI streams them.
  OutputDelta more;
  more.tool_calls = {ToolCall{1, "", "", R"("Par)", false, false}};
  const nlohmann::json piece = chat_formatter().delta_chunk(more)["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(piece, (nlohmann::json{{"index", 1}, {"function", {{"arguments", R"("Par)"}}}}));
}

}  // namespace
}  // namespace deltaserve::server
