// Request validation: every rejection is a 400 whose `param` names the offending field.
#include <gtest/gtest.h>

#include "server/openai_schema.h"

namespace deltaserve::server {
namespace {

SchemaLimits limits() {
  SchemaLimits l;
  l.num_vocab = 1000;
  return l;
}

// The ApiError a body produces (status 0 when it parses).
ApiError chat_error(const std::string& body) {
  try {
    parse_chat_request(body, limits());
  } catch (const ApiException& e) {
    return e.error;
  }
  return ApiError{0, "", "", "", "", 0};
}

ApiError completion_error(const std::string& body) {
  try {
    parse_completion_request(body, limits());
  } catch (const ApiException& e) {
    return e.error;
  }
  return ApiError{0, "", "", "", "", 0};
}

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

TEST(OpenAiSchema, ParsesAFullChatRequest) {
  const ChatRequest r = parse_chat_request(
      R"({"model":"m",)" + kMsgs + R"(,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,
          "max_completion_tokens":64,"max_tokens":10,"stop":["a","bc"],"seed":-7,
          "presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,
          "logit_bias":{"12":-100,"13":5.5},"logprobs":true,"top_logprobs":3,"stream":true,
          "stream_options":{"include_usage":true},"n":1,"user":"u",
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
          "tool_choice":{"type":"function","function":{"name":"f"}},
          "chat_template_kwargs":{"enable_thinking":false}})",
      limits());
  EXPECT_EQ(r.params.model, "m");
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_EQ(r.params.max_tokens, 64);  // max_completion_tokens wins
  EXPECT_EQ(r.params.max_tokens_param, "max_completion_tokens");
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.params.sampling.seed, static_cast<uint64_t>(-7));
  ASSERT_EQ(r.params.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.params.sampling.logit_bias[0].first, 12);
  EXPECT_TRUE(r.params.sampling.logprobs);
  EXPECT_EQ(r.params.sampling.top_logprobs, 3);
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
}

TEST(OpenAiSchema, ReasoningEffortNoneTurnsThinkingOff) {
  const auto thinking = [](const std::string& extra) {
    return parse_chat_request("{" + kMsgs + extra + "}", limits()).chat_template_kwargs.value("enable_thinking", RequestJson());
  };
  EXPECT_EQ(thinking(R"(,"reasoning_effort":"none")"), false);
  EXPECT_EQ(thinking(R"(,"reasoning_effort":"low")"), true);
  EXPECT_EQ(thinking(""), RequestJson());  // the template's (or the server's) default
  EXPECT_EQ(thinking(R"(,"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true})"), true);
}

TEST(OpenAiSchema, ThinkingTokenBudgetGoesToTheSampler) {
  EXPECT_EQ(parse_chat_request("{" + kMsgs + "}", limits()).params.sampling.thinking_budget, -1);
  EXPECT_EQ(parse_chat_request("{" + kMsgs + R"(,"thinking_token_budget":300})", limits()).params.sampling.thinking_budget,
            300);
  EXPECT_EQ(parse_chat_request("{" + kMsgs + R"(,"thinking_token_budget":0})", limits()).params.sampling.thinking_budget, 0);
  try {
    parse_chat_request("{" + kMsgs + R"(,"thinking_token_budget":-2})", limits());
    ADD_FAILURE() << "no 400";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.param, "thinking_token_budget");
  }
}

TEST(OpenAiSchema, NullMeansAbsent) {
  const ChatRequest r = parse_chat_request(
      "{" + kMsgs + R"(,"temperature":null,"stop":null,"max_tokens":null})", limits());
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.params.max_tokens.has_value());
}

TEST(OpenAiSchema, RejectsInvalidJson) {
  const ApiError e = chat_error("{\"messages\": [");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_EQ(chat_error("[1,2]").param, "body");
}

struct BadField {
  std::string fragment;  // appended to a valid body
  std::string param;
  std::string code;
};

class RejectsBadField : public ::testing::TestWithParam<BadField> {};

TEST_P(RejectsBadField, NamesTheParam) {
  const BadField& c = GetParam();
  const ApiError e = chat_error("{" + kMsgs + "," + c.fragment + "}");
  EXPECT_EQ(e.status, 400) << c.fragment;
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, c.param) << c.fragment << ": " << e.message;
  EXPECT_EQ(e.code, c.code) << c.fragment << ": " << e.message;
  EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, RejectsBadField,
    ::testing::Values(
        BadField{R"("temperature":2.5)", "temperature", "invalid_value"},
        BadField{R"("temperature":"hot")", "temperature", "invalid_type"},
        BadField{R"("top_p":0)", "top_p", "invalid_value"},
        BadField{R"("top_p":1.5)", "top_p", "invalid_value"},
        BadField{R"("top_k":-2)", "top_k", "invalid_value"},
        BadField{R"("min_p":2)", "min_p", "invalid_value"},
        BadField{R"("max_tokens":0)", "max_tokens", "invalid_value"},
        BadField{R"("max_tokens":1.5)", "max_tokens", "invalid_type"},
        BadField{R"("max_completion_tokens":"5")", "max_completion_tokens", "invalid_type"},
        BadField{R"("presence_penalty":3)", "presence_penalty", "invalid_value"},
        BadField{R"("frequency_penalty":-3)", "frequency_penalty", "invalid_value"},
        BadField{R"("repetition_penalty":0)", "repetition_penalty", "invalid_value"},
        BadField{R"("seed":"x")", "seed", "invalid_type"},
        BadField{R"("stop":5)", "stop", "invalid_type"},
        BadField{R"("stop":["a",5])", "stop[1]", "invalid_type"},
        BadField{R"("stop":["a",""])", "stop[1]", "invalid_value"},
        BadField{R"("logit_bias":{"abc":1})", "logit_bias.abc", "invalid_value"},
        BadField{R"("logit_bias":{"5000":1})", "logit_bias.5000", "invalid_value"},
        BadField{R"("logit_bias":{"5":101})", "logit_bias.5", "invalid_value"},
        BadField{R"("logit_bias":[1])", "logit_bias", "invalid_type"},
        BadField{R"("top_logprobs":2)", "top_logprobs", "invalid_value"},
        BadField{R"("logprobs":true,"top_logprobs":21)", "top_logprobs", "invalid_value"},
        BadField{R"("logprobs":1)", "logprobs", "invalid_type"},
        BadField{R"("stream":"yes")", "stream", "invalid_type"},
        BadField{R"("stream_options":{"include_usage":true})", "stream_options", "invalid_value"},
        BadField{R"("stream":true,"stream_options":{"include_usage":1})",
                 "stream_options.include_usage", "invalid_type"},
        BadField{R"("stream":true,"stream_options":{"bogus":1})", "stream_options.bogus",
                 "unknown_parameter"},
        BadField{R"("n":2)", "n", "unsupported_value"},
        BadField{R"("n":0)", "n", "invalid_value"},
        BadField{R"("frobnicate":1)", "frobnicate", "unknown_parameter"},
        BadField{R"("response_format":{"type":"xml"})", "response_format.type", "invalid_value"},
        BadField{R"("response_format":{"type":"json_schema"})", "response_format.json_schema",
                 "missing_required_parameter"},
        BadField{R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})",
                 "response_format.json_schema.schema", "missing_required_parameter"},
        BadField{R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"bogus":1}})",
                 "response_format.json_schema.bogus", "unknown_parameter"},
        BadField{R"("tools":{})", "tools", "invalid_type"},
        BadField{R"("tools":[{"type":"function","function":{}}])", "tools[0].function.name",
                 "missing_required_parameter"},
        // A malformed parameters schema is a 400 whatever the tool_choice (it is only compiled
        // into a grammar when a call is forced).
        BadField{R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"strung"}}}}}])",
                 "tools[0].function.parameters.properties.a.type", "invalid_value"},
        BadField{R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"array","items":{"anyOf":[{"type":"string"},{"type":7}]}}}}}}])",
                 "tools[0].function.parameters.properties.a.items.anyOf[1].type", "invalid_value"},
        BadField{R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":"string"}}}}])",
                 "tools[0].function.parameters.properties.a", "invalid_type"},
        BadField{R"("tool_choice":"sometimes")", "tool_choice", "invalid_value"},
        BadField{R"("tool_choice":"required")", "tool_choice", "invalid_value"},
        BadField{R"("chat_template_kwargs":[])", "chat_template_kwargs", "invalid_type"},
        BadField{R"("reasoning_field":"brain")", "reasoning_field", "invalid_value"}));

TEST(OpenAiSchema, RejectsBadMessages) {
  EXPECT_EQ(chat_error("{}").param, "messages");
  EXPECT_EQ(chat_error("{}").code, "missing_required_parameter");
  EXPECT_EQ(chat_error(R"({"messages":[]})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages":"hi"})").code, "invalid_type");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"wizard","content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":5}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":
      [{"type":"image_url","image_url":{"url":"x"}}]}]})").param, "messages[1].content[0].type");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","extra":1}]})").param,
            "messages[0].extra");
}

TEST(OpenAiSchema, NormalisesMessagesForTheTemplate) {
  const ChatRequest r = parse_chat_request(R"({"messages":[
      {"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"reasoning":"hm",
       "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"42"}]})",
                                           limits());
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["reasoning_content"], "hm");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);
  EXPECT_EQ(r.messages[3]["tool_call_id"], "c1");
}

TEST(OpenAiSchema, AnAssistantMessageMayCarryBothReasoningNames) {
  // As --reasoning-field both writes it, sent back in the next turn.
  const ChatRequest r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"},
      {"role":"assistant","content":"x","reasoning_content":"r1","reasoning":"r1"},
      {"role":"assistant","content":"y","reasoning":"r2"},{"role":"user","content":"again"}]})", limits());
  EXPECT_EQ(r.messages[1]["reasoning_content"], "r1");
  EXPECT_FALSE(r.messages[1].contains("reasoning"));
  EXPECT_EQ(r.messages[2]["reasoning_content"], "r2");
}

TEST(OpenAiSchema, LeadingSystemMessagesBecomeOne) {
  // Qwen's template fails on a second system message; agents often send two or three.
  const ChatRequest r = parse_chat_request(R"({"messages":[
      {"role":"system","content":"framework"},{"role":"developer","content":[{"type":"text","text":"user's"}]},
      {"role":"system","content":"third"},{"role":"user","content":"hi"},{"role":"system","content":"late"}]})",
                                           limits());
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["content"], "framework\n\nuser's\n\nthird");
  EXPECT_EQ(r.messages[1]["role"], "user");
  EXPECT_EQ(r.messages[2]["content"], "late");  // not leading: left to the template
  const ChatRequest named = parse_chat_request(R"({"messages":[{"role":"system","content":"a"},
      {"role":"system","name":"x","content":"b"},{"role":"user","content":"hi"}]})", limits());
  EXPECT_EQ(named.messages.size(), 3u);
}

TEST(OpenAiSchema, ResponseFormatIsKeptForTheConstraint) {
  const ChatRequest r = parse_chat_request("{" + kMsgs + R"(,"response_format":{"type":"json_schema",
      "json_schema":{"name":"a","strict":true,"schema":{"type":"object"}}}})", limits());
  EXPECT_EQ(r.response_format["json_schema"]["schema"]["type"], "object");
  EXPECT_TRUE(parse_chat_request("{" + kMsgs + "}", limits()).response_format.is_null());
}

TEST(OpenAiSchema, UnknownFieldsSentAsNullAreAbsent) {
  // Clients typed on OpenAI's whole schema send the fields they do not set as null.
  const ChatRequest r = parse_chat_request("{" + kMsgs + R"(,"functions":null,"function_call":null,
      "audio":null,"modalities":null,"prediction":null,"web_search_options":null,"tools":null,
      "stop":null,"n":null,"stream_options":null})", limits());
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","audio":null,"extra":1}]})").param,
            "messages[0].extra");
  EXPECT_EQ(chat_error("{" + kMsgs + R"(,"functions":[]})").param, "functions");
}

TEST(OpenAiSchema, UnknownFieldsCanBeAllowed) {
  SchemaLimits relaxed = limits();
  relaxed.reject_unknown_fields = false;
  EXPECT_NO_THROW(parse_chat_request("{" + kMsgs + R"(,"frobnicate":1})", relaxed));
}

TEST(OpenAiSchema, CompletionPromptForms) {
  EXPECT_EQ(*parse_completion_request(R"({"prompt":"abc"})", limits()).prompt_text, "abc");
  EXPECT_EQ(*parse_completion_request(R"({"prompt":["abc"]})", limits()).prompt_text, "abc");
  EXPECT_EQ(*parse_completion_request(R"({"prompt":[1,2,3]})", limits()).prompt_tokens,
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*parse_completion_request(R"({"prompt":[[4,5]]})", limits()).prompt_tokens,
            (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(completion_error(R"({})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt":""})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt":["a","b"]})").code, "unsupported_value");
  EXPECT_EQ(completion_error(R"({"prompt":[1,5000]})").param, "prompt[1]");
  EXPECT_EQ(completion_error(R"({"prompt":"a","logprobs":21})").param, "logprobs");
  EXPECT_EQ(completion_error(R"({"prompt":"a","echo":true})").param, "echo");
  EXPECT_EQ(completion_error(R"({"prompt":"a","best_of":2})").param, "best_of");
  const CompletionRequest r = parse_completion_request(R"({"prompt":"a","logprobs":2})", limits());
  EXPECT_TRUE(r.params.sampling.logprobs);
  EXPECT_EQ(r.params.sampling.top_logprobs, 2);
}

// Leading system messages are merged into one; the first one left after another message is
// remembered by its index in the request, for the 400 when the template refuses it.
TEST(OpenAiSchema, ASystemMessageAfterOthersIsRememberedByItsIndex) {
  const auto late = [](const std::string& messages) {
    return parse_chat_request(R"({"messages":)" + messages + "}", limits()).late_system_param;
  };
  EXPECT_EQ(late(R"([{"role":"system","content":"a"},{"role":"developer","content":"b"},{"role":"user","content":"u"}])"), "");
  EXPECT_EQ(late(R"([{"role":"user","content":"u"},{"role":"system","content":"a"}])"), "messages[1]");
  EXPECT_EQ(late(R"([{"role":"system","content":"a"},{"role":"user","content":"u"},{"role":"assistant","content":"x"},)"
                 R"({"role":"developer","content":"b"},{"role":"system","content":"c"}])"),
            "messages[3]");
  // A named second system message is not merged (its name would be lost): it is late too.
  EXPECT_EQ(late(R"([{"role":"system","content":"a"},{"role":"system","name":"n","content":"b"},{"role":"user","content":"u"}])"),
            "messages[1]");
}

// OpenAI's and vLLM's completions default to 16 tokens; chat has no API default.
TEST(OpenAiSchema, CompletionsDefaultTo16TokensChatHasNoDefault) {
  const CompletionRequest c = parse_completion_request(R"({"prompt":"a"})", limits());
  EXPECT_FALSE(c.params.max_tokens.has_value());
  EXPECT_EQ(c.params.api_default_max_tokens, 16);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"a","max_tokens":null})", limits()).params.api_default_max_tokens, 16);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"a","max_tokens":40})", limits()).params.max_tokens, 40);
  EXPECT_EQ(parse_chat_request("{" + kMsgs + "}", limits()).params.api_default_max_tokens, 0);
}

TEST(OpenAiSchema, TokenizeAndDetokenize) {
  EXPECT_EQ(*parse_tokenize_request(R"({"prompt":"x"})", limits()).prompt, "x");
  EXPECT_TRUE(parse_tokenize_request("{" + kMsgs + "}", limits()).chat.has_value());
  EXPECT_THROW(parse_tokenize_request(R"({})", limits()), ApiException);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2]})", limits()).tokens.size(), 2u);
  try {
    parse_detokenize_request(R"({"tokens":[1,-2]})", limits());
    FAIL();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.param, "tokens[1]");
  }
}

TEST(OpenAiSchema, ErrorBodyShape) {
  const ApiError e = chat_error("{" + kMsgs + R"(,"temperature":9})");
  const nlohmann::json body = e.body();
  ASSERT_TRUE(body.contains("error"));
  for (const char* key : {"message", "type", "param", "code"}) {
    EXPECT_TRUE(body["error"].contains(key)) << key;
  }
  EXPECT_TRUE(invalid_json("x").body()["error"]["param"].is_null());
}

}  // namespace
}  // namespace deltaserve::server
