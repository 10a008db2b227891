// Translation of the agent APIs' requests into the internal ChatRequest: Anthropic Messages
// (system, content blocks, tool_use / tool_result, tools, tool_choice, thinking, sampling)
// and OpenAI Responses (input items, instructions, tools, text.format, previous_response_id),
// with the 400s for what is malformed or not offered.
#include <gtest/gtest.h>

#include "server/anthropic_request.h"
#include "server/responses_request.h"

namespace deltaserve::server {
namespace {

const SchemaLimits kLimits;

// A store entry of a conversation alone.
ResponseStore::Stored stored(RequestJson messages) {
  ResponseStore::Stored s;
  s.messages = std::move(messages);
  return s;
}

ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "no ApiException";
  return {};
}

TEST(AnthropicRequest, ConversationMapsToChatMessages) {
  const ChatRequest r = parse_anthropic_request(R"({
    "model": "m", "max_tokens": 32,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Need a tool.", "signature": "x"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
        {"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}]}],
    "tools": [{"name": "get_weather", "description": "d",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "any"},
    "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stream": true})",
                                                kLimits);
  const RequestJson& m = r.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief.\nBe kind.");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Need a tool.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(m[3]["content"], "sunny");
  EXPECT_EQ(m[4]["role"], "user");
  EXPECT_EQ(m[4]["content"], "thanks");
  EXPECT_EQ(r.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(r.tool_choice, "required");
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.params.max_tokens, 32);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_TRUE(r.params.stream);
}

TEST(AnthropicRequest, ToolChoiceAndThinking) {
  const std::string head = R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], )";
  EXPECT_EQ(parse_anthropic_request(head + R"("tool_choice": {"type": "none"}})", kLimits).tool_choice, "none");
  EXPECT_EQ(parse_anthropic_request(head + R"("tool_choice": {"type": "auto"}})", kLimits).tool_choice, "auto");
  const ChatRequest named = parse_anthropic_request(head + R"("tool_choice": {"type": "tool", "name": "f"}})", kLimits);
  EXPECT_EQ(named.tool_choice, RequestJson::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_TRUE(named.parallel_tool_calls);  // Anthropic's default allows several tool_use blocks
  const ChatRequest single = parse_anthropic_request(
      head + R"("tool_choice": {"type": "any", "disable_parallel_tool_use": true}})", kLimits);
  EXPECT_EQ(single.tool_choice, "required");
  EXPECT_FALSE(single.parallel_tool_calls);
  EXPECT_TRUE(parse_anthropic_request(head + R"("tool_choice": {"type": "any", "disable_parallel_tool_use": false}})",
                                      kLimits).parallel_tool_calls);
  const std::string big = R"({"model": "m", "max_tokens": 2048, "messages": [{"role": "user", "content": "x"}], )";
  const ChatRequest thinking = parse_anthropic_request(
      big + R"("thinking": {"type": "enabled", "budget_tokens": 1024}})", kLimits);
  EXPECT_EQ(thinking.chat_template_kwargs["enable_thinking"], true);
  EXPECT_EQ(thinking.params.sampling.thinking_budget, 1024);
  // The SDK's ThinkingConfig carries `display`; it is accepted (the text is always whole).
  const ChatRequest adaptive =
      parse_anthropic_request(head + R"("thinking": {"type": "adaptive", "display": "summarized"}})", kLimits);
  EXPECT_EQ(adaptive.chat_template_kwargs["enable_thinking"], true);
  EXPECT_EQ(adaptive.params.sampling.thinking_budget, -1);  // the model decides how long
  EXPECT_EQ(error_of([&] { parse_anthropic_request(big + R"("thinking": {"type": "enabled", "budget_tokens": 1024,
      "display": "full"}})", kLimits); }).param, "thinking.display");
}

// As Anthropic's API: "enabled" needs budget_tokens, at least 1024 and below max_tokens.
TEST(AnthropicRequest, ThinkingBudgetIsCheckedAsAnthropicChecksIt) {
  const auto with = [](int max_tokens, const std::string& thinking) {
    return R"({"model": "m", "max_tokens": )" + std::to_string(max_tokens) +
           R"(, "messages": [{"role": "user", "content": "x"}], "thinking": )" + thinking + "}";
  };
  ApiError e = error_of([&] { parse_anthropic_request(with(4096, R"({"type": "enabled"})"), kLimits); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  e = error_of([&] { parse_anthropic_request(with(4096, R"({"type": "enabled", "budget_tokens": 1023})"), kLimits); });
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  EXPECT_NE(e.message.find("1024"), std::string::npos) << e.message;
  e = error_of([&] { parse_anthropic_request(with(2000, R"({"type": "enabled", "budget_tokens": 2000})"), kLimits); });
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  EXPECT_NE(e.message.find("max_tokens"), std::string::npos) << e.message;
  EXPECT_EQ(parse_anthropic_request(with(2001, R"({"type": "enabled", "budget_tokens": 2000})"), kLimits)
                .params.sampling.thinking_budget, 2000);
  // Disabled thinking ignores a budget; count_tokens has no max_tokens to compare with.
  EXPECT_EQ(parse_anthropic_request(with(8, R"({"type": "disabled", "budget_tokens": 5000})"), kLimits)
                .params.sampling.thinking_budget, -1);
  EXPECT_EQ(parse_anthropic_count_tokens(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "thinking": {"type": "enabled", "budget_tokens": 5000}})", kLimits).chat_template_kwargs["enable_thinking"], true);
}

TEST(AnthropicRequest, AFinalAssistantMessageIsAPrefillThatTheAnswerContinues) {
  const std::string head = R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}, )";
  const ChatRequest prefill = parse_anthropic_request(
      head + R"({"role": "assistant", "content": [{"type": "text", "text": "{\"a\":"}]}]})", kLimits);
  EXPECT_TRUE(prefill.continue_final_message);
  EXPECT_FALSE(prefill.add_generation_prompt);
  EXPECT_EQ(prefill.messages.back()["content"], "{\"a\":");
  // A closed turn (the last message a user's, or an assistant's tool call) gets a new turn.
  const ChatRequest plain = parse_anthropic_request(head + R"({"role": "assistant", "content": "y"},
      {"role": "user", "content": "z"}]})", kLimits);
  EXPECT_FALSE(plain.continue_final_message);
  EXPECT_TRUE(plain.add_generation_prompt);
  const ChatRequest call = parse_anthropic_request(head + R"({"role": "assistant", "content": [
      {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]})", kLimits);
  EXPECT_FALSE(call.continue_final_message);
  // The template trims a turn's end, so a prefill cannot end in whitespace (Anthropic's 400 too).
  const ApiError e = error_of([&] {
    parse_anthropic_request(head + R"({"role": "assistant", "content": "Hello "}]})", kLimits);
  });
  EXPECT_EQ(e.param, "messages[1].content");
  EXPECT_NE(e.message.find("trailing whitespace"), std::string::npos);
}

TEST(AnthropicRequest, OutputConfigFormatConstrainsAndCacheControlAndStrictAreAccepted) {
  const std::string head = R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], )";
  const ChatRequest r = parse_anthropic_request(head + R"("cache_control": {"type": "ephemeral"},
      "tools": [{"name": "f", "strict": true, "input_schema": {"type": "object"}}],
      "output_config": {"effort": "low", "format": {"type": "json_schema",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})",
                                                kLimits);
  EXPECT_EQ(r.response_format["type"], "json_schema");
  EXPECT_EQ(r.response_format["json_schema"]["schema"]["required"][0], "a");
  EXPECT_EQ(r.response_format_schema_param, "output_config.format.schema");
  EXPECT_EQ(r.response_format["json_schema"]["strict"], true);  // Anthropic's structured outputs are strict
  EXPECT_EQ(r.tools[0]["function"]["strict"], true);  // carried: it decides what an unknown format does
  EXPECT_NO_THROW(parse_anthropic_count_tokens(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "cache_control": {"type": "ephemeral"}, "output_config": {"effort": "high"}})", kLimits));
  ApiError e = error_of([&] { parse_anthropic_request(head + R"("output_config": {"format": {"type": "text"}}})", kLimits); });
  EXPECT_EQ(e.param, "output_config.format.type");
  e = error_of([&] { parse_anthropic_request(head + R"("output_config": {"format": {"type": "json_schema"}}})", kLimits); });
  EXPECT_EQ(e.param, "output_config.format.schema");
  e = error_of([&] { parse_anthropic_request(head + R"("output_config": {"effort": "extreme"}})", kLimits); });
  EXPECT_EQ(e.param, "output_config.effort");
  ResponseStore store(8, 60, 1 << 20);
  EXPECT_EQ(parse_responses_request(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
      "schema": {"type": "object"}}}})", kLimits, store).chat.response_format_schema_param,
            "text.format.schema");
}

TEST(AnthropicRequest, BadInputIsA400NamingTheField) {
  const auto with_content = [](const std::string& content) {
    return R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": )" + content + "}]}";
  };
  ApiError e = error_of([&] { parse_anthropic_request(with_content(R"([{"type": "bogus"}])"), kLimits); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[0].content[0].type");
  EXPECT_NE(e.message.find("unknown content block type 'bogus'"), std::string::npos);
  e = error_of([&] { parse_anthropic_request(with_content(R"([{"type": "image", "source": {}}])"), kLimits); });
  EXPECT_NE(e.message.find("text-only"), std::string::npos);
  e = error_of([&] { parse_anthropic_request(with_content(R"([{"type": "tool_use", "id": "a", "name": "b"}])"), kLimits); });
  EXPECT_NE(e.message.find("not allowed in a user message"), std::string::npos);
  e = error_of([&] {
    parse_anthropic_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "f", "input_schema": {"type": "array"}}]})", kLimits);
  });
  EXPECT_EQ(e.param, "tools[0].input_schema.type");
  e = error_of([&] {
    parse_anthropic_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "f", "input_schema": {"type": "object", "properties": []}}]})", kLimits);
  });
  EXPECT_EQ(e.param, "tools[0].input_schema.properties");
  e = error_of([&] {
    parse_anthropic_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]})", kLimits);
  });
  EXPECT_EQ(e.param, "tools[0].type");
  e = error_of([&] { parse_anthropic_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", kLimits); });
  EXPECT_EQ(e.param, "max_tokens");
  e = error_of([&] {
    parse_anthropic_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]})", kLimits);
  });
  EXPECT_EQ(e.param, "messages[0].role");
  const std::string stop_head = R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], )";
  e = error_of([&] { parse_anthropic_request(stop_head + R"("tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}})", kLimits); });
  EXPECT_EQ(e.param, "tool_choice.name");
  EXPECT_NE(e.message.find("no tool named 'g'"), std::string::npos);
  e = error_of([&] { parse_anthropic_request(stop_head + R"("metadata": "user-1"})", kLimits); });
  EXPECT_EQ(e.param, "metadata");
  EXPECT_NO_THROW(parse_anthropic_request(stop_head + R"("metadata": {"user_id": "u"}, "service_tier": "auto"})", kLimits));
  e = error_of([&] { parse_anthropic_request(stop_head + R"("stop_sequences": ["a", 3]})", kLimits); });
  EXPECT_EQ(e.param, "stop_sequences[1]");
  e = error_of([&] { parse_anthropic_request(stop_head + R"("stop_sequences": ["a", ""]})", kLimits); });
  EXPECT_EQ(e.param, "stop_sequences[1]");
  SchemaLimits two_stops;
  two_stops.max_stop_strings = 2;
  e = error_of([&] { parse_anthropic_request(stop_head + R"("stop_sequences": ["a", "b", "c"]})", two_stops); });
  EXPECT_EQ(e.param, "stop_sequences");
  // count_tokens needs no max_tokens.
  EXPECT_NO_THROW(parse_anthropic_count_tokens(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", kLimits));
}

// Anthropic's pairing rule: each tool_use is answered by a tool_result in the next (user)
// turn, and each tool_result answers a tool_use of the turn before; consecutive messages of one
// role are one turn. A final assistant turn's calls need no answer yet.
TEST(AnthropicRequest, ToolResultsAndToolUsesMustPairUp) {
  const std::string head = R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}, )";
  const std::string use = R"({"role": "assistant", "content": [{"type": "text", "text": "a"},
      {"type": "tool_use", "id": "t1", "name": "f", "input": {}}, {"type": "tool_use", "id": "t2", "name": "f", "input": {}}]})";
  const auto result = [](const std::string& id) {
    return R"({"type": "tool_result", "tool_use_id": ")" + id + R"(", "content": "r"})";
  };
  // Both answered, also across two consecutive user messages.
  EXPECT_NO_THROW(parse_anthropic_request(head + use + R"(, {"role": "user", "content": [)" + result("t2") + ", " +
                                              result("t1") + "]}]}", kLimits));
  EXPECT_NO_THROW(parse_anthropic_request(head + use + R"(, {"role": "user", "content": [)" + result("t1") +
                                              R"(]}, {"role": "user", "content": [)" + result("t2") + "]}]}", kLimits));
  EXPECT_NO_THROW(parse_anthropic_request(head + use + "]}", kLimits));  // calls not answered yet
  // A call left unanswered.
  ApiError e = error_of([&] {
    parse_anthropic_request(head + use + R"(, {"role": "user", "content": [)" + result("t1") + "]}]}", kLimits);
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[2]");
  EXPECT_NE(e.message.find("without tool_result blocks immediately after: t2"), std::string::npos);
  e = error_of([&] { parse_anthropic_request(head + use + R"(, {"role": "user", "content": "next"}]})", kLimits); });
  EXPECT_NE(e.message.find("after: t1, t2"), std::string::npos);
  // A result of no call: none before, a call of an older turn, or an unknown id.
  e = error_of([&] {
    parse_anthropic_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [)" +
                                result("t1") + "]}]}", kLimits);
  });
  EXPECT_EQ(e.param, "messages[0].content[0].tool_use_id");
  EXPECT_NE(e.message.find("unexpected tool_use_id 't1'"), std::string::npos);
  e = error_of([&] {
    parse_anthropic_request(head + use + R"(, {"role": "user", "content": [)" + result("t1") + ", " + result("t2") +
                                R"(]}, {"role": "assistant", "content": "b"}, {"role": "user", "content": [)" +
                                result("t1") + "]}]}", kLimits);
  });
  EXPECT_EQ(e.param, "messages[4].content[0].tool_use_id");
  e = error_of([&] {
    parse_anthropic_request(head + use + R"(, {"role": "user", "content": [)" + result("t1") + ", " + result("t2") +
                                ", " + result("t3") + "]}]}", kLimits);
  });
  EXPECT_EQ(e.param, "messages[2].content[2].tool_use_id");
}

TEST(AnthropicRequest, EmptyContentTemperatureAboveOneAnyWithoutToolsAndDuplicateToolNamesAre400s) {
  const auto messages = [](const std::string& list) {
    return R"({"model": "m", "max_tokens": 8, "messages": )" + list + "}";
  };
  ApiError e = error_of([&] { parse_anthropic_request(messages(R"([{"role": "user", "content": ""}])"), kLimits); });
  EXPECT_EQ(e.param, "messages[0].content");
  EXPECT_NE(e.message.find("non-empty content"), std::string::npos);
  e = error_of([&] { parse_anthropic_request(messages(R"([{"role": "user", "content": []}])"), kLimits); });
  EXPECT_EQ(e.param, "messages[0].content");
  e = error_of([&] {
    parse_anthropic_request(messages(R"([{"role": "assistant", "content": ""}, {"role": "user", "content": "x"}])"), kLimits);
  });
  EXPECT_EQ(e.param, "messages[0].content");
  // The final assistant message may be empty (no prefill).
  EXPECT_NO_THROW(parse_anthropic_request(messages(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}])"),
                                          kLimits));
  const std::string head = R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], )";
  e = error_of([&] { parse_anthropic_request(head + R"("temperature": 1.5})", kLimits); });
  EXPECT_EQ(e.param, "temperature");  // Anthropic's range is 0..1
  EXPECT_NO_THROW(parse_anthropic_request(head + R"("temperature": 1})", kLimits));
  e = error_of([&] { parse_anthropic_request(head + R"("tool_choice": {"type": "any"}})", kLimits); });
  EXPECT_EQ(e.param, "tool_choice.type");
  EXPECT_NE(e.message.find("'any' needs at least one tool"), std::string::npos);
  e = error_of([&] {
    parse_anthropic_request(head + R"("tools": [{"name": "f", "input_schema": {"type": "object"}},
        {"name": "g", "input_schema": {"type": "object"}}, {"name": "f", "input_schema": {"type": "object"}}]})", kLimits);
  });
  EXPECT_EQ(e.param, "tools[2].name");
  EXPECT_NE(e.message.find("tool names must be unique"), std::string::npos);
}

TEST(ResponsesRequest, ItemsMapToChatMessages) {
  ResponseStore store(8, 60, 1 << 20);
  const ResponsesRequest r = parse_responses_request(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.2,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need a tool."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
      {"role": "developer", "content": "note"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "reasoning": {"effort": "none"},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}}})",
                                                     kLimits, store);
  const RequestJson& m = r.chat.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief.");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Need a tool.");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[2]["tool_calls"][1]["id"], "call_2");
  EXPECT_EQ(m[2]["tool_calls"][1]["function"]["arguments"]["city"], "Oslo");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[4]["tool_call_id"], "call_2");
  EXPECT_EQ(m[5]["role"], "system");  // developer -> system
  EXPECT_EQ(r.history.size(), 5u);     // without the instructions
  EXPECT_EQ(r.chat.tools[0]["function"]["strict"], true);
  EXPECT_EQ(r.chat.tool_choice, RequestJson::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(r.chat.chat_template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(r.chat.parallel_tool_calls);  // OpenAI's default
  EXPECT_EQ(r.chat.params.max_tokens, 50);
  EXPECT_EQ(r.chat.params.max_tokens_param, "max_output_tokens");  // named in context-length 400s
  EXPECT_EQ(r.chat.response_format,
            RequestJson::parse(R"({"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object"},"strict":true}})"));
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 50);
}

// The response repeats temperature and top_p as the client sent them, not as the sampler's
// float (0.7 came back as 0.699999988079071); absent, OpenAI's default 1.
TEST(ResponsesRequest, EchoesSamplingParametersAsSent) {
  ResponseStore store(8, 60, 1 << 20);
  const ResponsesRequest r =
      parse_responses_request(R"({"input": "hi", "temperature": 0.7, "top_p": 0.9})", kLimits, store);
  EXPECT_EQ(r.echo["temperature"].dump(), "0.7");
  EXPECT_EQ(r.echo["top_p"].dump(), "0.9");
  const ResponsesRequest plain = parse_responses_request(R"({"input": "hi", "temperature": null})", kLimits, store);
  EXPECT_EQ(plain.echo["temperature"], 1.0);
  EXPECT_EQ(plain.echo["top_p"], 1.0);
}

TEST(ResponsesRequest, ThinkingTokenBudgetIsChats) {
  ResponseStore store(8, 60, 1 << 20);
  EXPECT_EQ(parse_responses_request(R"({"input": "hi", "thinking_token_budget": 256})", kLimits, store)
                .chat.params.sampling.thinking_budget, 256);
  EXPECT_EQ(parse_responses_request(R"({"input": "hi"})", kLimits, store).chat.params.sampling.thinking_budget, -1);
  EXPECT_EQ(error_of([&] { parse_responses_request(R"({"input": "hi", "thinking_token_budget": -1})", kLimits, store); })
                .param, "thinking_token_budget");
}

TEST(ResponsesRequest, InstructionsAndLeadingDeveloperMessagesBecomeOneSystemMessage) {
  // Agents send instructions and developer messages together; the template takes one system
  // message, first.
  ResponseStore store(8, 60, 1 << 20);
  const ResponsesRequest r = parse_responses_request(R"({"instructions": "You are an agent.", "input": [
      {"role": "developer", "content": "Use tools."}, {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "hi"}]})", kLimits, store);
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0]["role"], "system");
  EXPECT_EQ(r.chat.messages[0]["content"], "You are an agent.\n\nUse tools.\n\nBe brief.");
  EXPECT_EQ(r.chat.messages[1]["role"], "user");
  EXPECT_EQ(r.history.size(), 3u);  // the stored conversation keeps the items as sent
  const ResponsesRequest alone = parse_responses_request(
      R"({"input": [{"role": "developer", "content": "a"}, {"role": "developer", "content": "b"}, {"role": "user", "content": "hi"}]})",
      kLimits, store);
  ASSERT_EQ(alone.chat.messages.size(), 2u);
  EXPECT_EQ(alone.chat.messages[0]["content"], "a\n\nb");
}

// A system / developer message after another one is what Qwen's template refuses: the
// request remembers the client's own field for the 400 (input[i], not the chat index).
TEST(ResponsesRequest, ASystemItemAfterOthersIsRememberedByItsInputIndex) {
  ResponseStore store(8, 60, 1 << 20);
  const ResponsesRequest late = parse_responses_request(R"({"instructions": "x", "input": [
      {"role": "developer", "content": "a"}, {"role": "user", "content": "hi"},
      {"role": "assistant", "content": "yo"}, {"role": "developer", "content": "b"},
      {"role": "system", "content": "c"}]})", kLimits, store);
  EXPECT_EQ(late.chat.late_system_param, "input[3]");
  const ResponsesRequest leading = parse_responses_request(R"({"input": [
      {"role": "system", "content": "a"}, {"role": "developer", "content": "b"}, {"role": "user", "content": "hi"}]})",
      kLimits, store);
  EXPECT_EQ(leading.chat.late_system_param, "");
  // After a stored conversation, a developer item is late even as the first of the input.
  store.put("resp_a", stored(RequestJson::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}])")));
  const ResponsesRequest after_history = parse_responses_request(
      R"({"previous_response_id": "resp_a", "input": [{"role": "developer", "content": "b"}]})", kLimits, store);
  EXPECT_EQ(after_history.chat.late_system_param, "input[0]");
}

TEST(ResponsesRequest, JsonObjectAndTextFormats) {
  ResponseStore store(8, 60, 1 << 20);
  EXPECT_EQ(parse_responses_request(R"({"input": "x", "text": {"format": {"type": "json_object"}}})", kLimits, store)
                .chat.response_format,
            RequestJson::parse(R"({"type":"json_object"})"));
  EXPECT_TRUE(parse_responses_request(R"({"input": "x", "text": {"format": {"type": "text"}}})", kLimits, store)
                  .chat.response_format.is_null());
}

TEST(ResponsesRequest, PreviousResponseIdPrependsTheStoredConversation) {
  ResponseStore store(8, 60, 1 << 20);
  store.put("resp_a", stored(RequestJson::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}])")));
  const ResponsesRequest r = parse_responses_request(
      R"({"input": "again", "previous_response_id": "resp_a", "instructions": "new"})", kLimits, store);
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0]["content"], "new");
  EXPECT_EQ(r.chat.messages[2]["content"], "yo");
  EXPECT_EQ(r.chat.messages[3]["content"], "again");
  EXPECT_EQ(r.history.size(), 3u);
  const ApiError e = error_of([&] {
    parse_responses_request(R"({"input": "x", "previous_response_id": "resp_b"})", kLimits, store);
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_EQ(e.code, "previous_response_not_found");  // OpenAI's code, which agent clients match
  EXPECT_NE(e.message.find("Previous response with id 'resp_b' not found"), std::string::npos);
}

// As OpenAI's: a function_call_output answers a function_call of the input or of the stored
// conversation; one that answers nothing is a 400 naming the item.
TEST(ResponsesRequest, AFunctionCallOutputMustAnswerAKnownCall) {
  ResponseStore store(8, 60, 1 << 20);
  ApiError e = error_of([&] {
    parse_responses_request(R"({"input": [{"role": "user", "content": "x"},
        {"type": "function_call_output", "call_id": "call_9", "output": "sunny"}]})", kLimits, store);
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "input[1].call_id");
  EXPECT_NE(e.message.find("No tool call found for function call output with call_id 'call_9'"), std::string::npos);
  store.put("resp_a", stored(RequestJson::parse(R"([{"role":"user","content":"hi"},
      {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}])")));
  const ResponsesRequest r = parse_responses_request(R"({"previous_response_id": "resp_a",
      "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})", kLimits, store);
  EXPECT_EQ(r.chat.messages.back()["role"], "tool");
}

TEST(ResponsesRequest, WhatIsNotOfferedIsA400) {
  ResponseStore store(8, 60, 1 << 20);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "x", "tools": [{"type": "file_search"}]})", "tools[0].type"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "conversation": "c"})", "conversation"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})", "input[0].content[0].type"},
      {R"({"input": [{"type": "web_search_call"}]})", "input[0].type"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema"}}})", "text.format.name"},
      {R"({"input": "x", "unknown": 1})", "unknown"},
      {R"({"model": "m"})", "input"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}})",
       "tool_choice.name"},
      {R"({"input": "x", "max_output_tokens": "16"})", "max_output_tokens"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = error_of([&] { parse_responses_request(body, kLimits, store); });
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
  }
}

TEST(ResponseStore, BoundedByEntriesBytesAndTime) {
  using Clock = ResponseStore::Clock;
  const Clock::time_point t0 = Clock::now();
  ResponseStore store(2, 10, 1000);
  store.put("a", stored(RequestJson::array({"x"})), t0);
  store.put("b", stored(RequestJson::array({"y"})), t0);
  store.put("c", stored(RequestJson::array({"z"})), t0);
  EXPECT_FALSE(store.get("a", t0));  // entries bound: the oldest went
  EXPECT_TRUE(store.get("b", t0));
  EXPECT_TRUE(store.get("c", t0 + std::chrono::seconds(9)));
  EXPECT_FALSE(store.get("c", t0 + std::chrono::seconds(10)));  // ttl
  EXPECT_EQ(store.size(), 0u);
  store.put("big", stored(RequestJson::array({std::string(2000, 'x')})), t0);  // over the byte bound
  EXPECT_FALSE(store.get("big", t0));
  store.put("d", stored(RequestJson::array({std::string(600, 'x')})), t0);
  store.put("e", stored(RequestJson::array({std::string(600, 'x')})), t0);
  EXPECT_FALSE(store.get("d", t0));  // byte bound: the oldest went
  EXPECT_TRUE(store.get("e", t0));
  EXPECT_TRUE(store.erase("e", t0));
  EXPECT_FALSE(store.get("e", t0));
  EXPECT_FALSE(store.erase("e", t0));
  store.put("f", {RequestJson::array({"m"}), R"({"id":"f"})", nlohmann::json::array({1, 2})}, t0);
  const std::optional<ResponseStore::Stored> f = store.find("f", t0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->response_json, R"({"id":"f"})");
  EXPECT_EQ(f->input_items.size(), 2u);
  ResponseStore off(0, 10, 1000);
  off.put("a", stored(RequestJson::array()), t0);
  EXPECT_FALSE(off.get("a", t0));
}

}  // namespace
}  // namespace deltaserve::server
