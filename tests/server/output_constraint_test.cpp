// The chat request's constraint: forced tool calls that the server's own parser reads back
// with schema-valid arguments, response_format schemas, and 400s naming the field.
#include <gtest/gtest.h>

#include <random>

#include "server/api_error.h"
#include "server/fake_text_codec.h"
#include "server/output_constraint.h"
#include "server/tool_call_parser.h"

namespace deltaserve::server {
namespace {

namespace grammar = runtime::grammar;

const RequestJson kTools = RequestJson::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
    "city":{"type":"string","enum":["Paris","Oslo"]},"days":{"type":"integer"},
    "opts":{"type":"object","properties":{"wind":{"type":"boolean"}},"required":["wind"],"additionalProperties":false}},
    "required":["city","days","opts"],"additionalProperties":false}}},
  {"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}])");

ChatRequest chat(RequestJson tool_choice, RequestJson response_format = nullptr, bool parallel = false) {
  ChatRequest r;
  r.tools = kTools;
  r.parallel_tool_calls = parallel;
  r.tool_choice = std::move(tool_choice);
  r.response_format = std::move(response_format);
  return r;
}

// Text drawn token by token, uniformly among the tokens the constraint allows, until an end id.
std::string random_output(const std::shared_ptr<const grammar::Constraint>& c, const FakeTextCodec& codec, uint32_t seed,
                          const std::string& free_prefix = "") {
  grammar::ConstraintState st(c);
  std::string text;
  for (const char ch : free_prefix) {
    st.accept(static_cast<uint8_t>(ch));
    text += ch;
  }
  std::mt19937 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    const auto mask = st.mask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < codec.num_vocab(); ++id) {
      if (mask->has(id)) allowed.push_back(id);
    }
    const int32_t id = allowed[rng() % allowed.size()];
    if (id == FakeTextCodec::kImEnd || id == FakeTextCodec::kEndOfText) return text;
    text += codec.token_text(id);
    st.accept(id);
  }
  ADD_FAILURE() << "no end after 20000 tokens: " << text;
  return text;
}

// The calls of a forced output, checked against kTools' schemas.
std::vector<ToolCall> check_forced_calls(const std::string& text) {
  ToolCallParser parser(tool_param_types(kTools));
  const ToolCallParser::Pieces a = parser.push(text);
  const ToolCallParser::Pieces b = parser.finish();
  EXPECT_EQ(a.content() + b.content(), "") << text;
  std::vector<ToolCall> calls = a.calls();
  for (const ToolCall& piece : b.calls()) append_call_piece(calls, piece);
  for (const ToolCall& call : calls) {
    const RequestJson args = RequestJson::parse(call.arguments);
    if (call.name == "ping") {
      EXPECT_TRUE(args.empty()) << text;
      continue;
    }
    EXPECT_EQ(call.name, "get_weather") << text;
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << text;
    EXPECT_TRUE(args["days"].is_number_integer()) << text;
    EXPECT_TRUE(args["opts"]["wind"].is_boolean()) << text;
  }
  return calls;
}

TEST(OutputConstraint, ForcedCallsParseBackWithValidArguments) {
  const FakeTextCodec codec;
  const auto c = build_output_constraint(chat("required"), codec, false, codec.eos_token_ids());
  ASSERT_TRUE(c);
  for (uint32_t seed = 0; seed < 40; ++seed) {
    EXPECT_EQ(check_forced_calls(random_output(c, codec, seed)).size(), 1u);  // parallel_tool_calls false
  }
}

// parallel_tool_calls (the default): one or more calls, each valid; named: all the same tool.
TEST(OutputConstraint, ParallelForcedCallsAreOneOrMoreValidCalls) {
  const FakeTextCodec codec;
  const auto c = build_output_constraint(chat("required", nullptr, true), codec, false, codec.eos_token_ids());
  size_t most = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const size_t n = check_forced_calls(random_output(c, codec, seed)).size();
    EXPECT_GE(n, 1u);
    most = std::max(most, n);
  }
  EXPECT_GE(most, 2u);  // several calls do happen
  const auto named = build_output_constraint(
      chat(RequestJson::parse(R"({"type":"function","function":{"name":"ping"}})"), nullptr, true), codec, false,
      codec.eos_token_ids());
  most = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<ToolCall> calls = check_forced_calls(random_output(named, codec, seed));
    EXPECT_GE(calls.size(), 1u);
    for (const ToolCall& call : calls) EXPECT_EQ(call.name, "ping");
    most = std::max(most, calls.size());
  }
  EXPECT_GE(most, 2u);
}

TEST(OutputConstraint, NamedToolAndReasoningFirst) {
  const FakeTextCodec codec;
  const auto c = build_output_constraint(chat(RequestJson::parse(R"({"type":"function","function":{"name":"ping"}})")),
                                         codec, true, codec.eos_token_ids());
  const std::string text = random_output(c, codec, 1, "free {not json <tool_call> </think>");
  const std::string after = text.substr(text.find("</think>") + 8);
  EXPECT_EQ(after.substr(after.find_first_not_of(" \t\r\n")), "<tool_call>\n<function=ping>\n</function>\n</tool_call>")
      << text;
}

TEST(OutputConstraint, ResponseFormats) {
  const FakeTextCodec codec;
  EXPECT_FALSE(build_output_constraint(chat("auto"), codec, false, {}));
  EXPECT_FALSE(build_output_constraint(chat(nullptr, RequestJson::parse(R"({"type":"text"})")), codec, false, {}));
  const auto obj = build_output_constraint(chat(nullptr, RequestJson::parse(R"({"type":"json_object"})")), codec, false,
                                           codec.eos_token_ids());
  EXPECT_TRUE(RequestJson::parse(random_output(obj, codec, 3)).is_object());
  const auto schema = build_output_constraint(
      chat("none", RequestJson::parse(R"({"type":"json_schema","json_schema":{"name":"n","schema":
          {"type":"array","items":{"type":"integer"}}}})")),
      codec, false, codec.eos_token_ids());
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const RequestJson v = RequestJson::parse(random_output(schema, codec, seed));
    ASSERT_TRUE(v.is_array());
    for (const RequestJson& x : v) EXPECT_TRUE(x.is_number_integer());
  }
}

ApiError constraint_error(const ChatRequest& r) {
  const FakeTextCodec codec;
  try {
    build_output_constraint(r, codec, false, {});
  } catch (const ApiException& e) {
    return e.error;
  }
  return ApiError{0, "", "", "", "", 0};
}

TEST(OutputConstraint, AThinkingBudgetInsideReasoningGetsAConstraintWithoutGrammar) {
  FakeTextCodec codec;
  ChatRequest r = chat(nullptr);
  EXPECT_EQ(build_output_constraint(r, codec, true, codec.eos_token_ids()), nullptr);  // no budget: free
  r.params.sampling.thinking_budget = 2;
  EXPECT_EQ(build_output_constraint(r, codec, false, codec.eos_token_ids()), nullptr);  // thinking off
  const auto c = build_output_constraint(r, codec, true, codec.eos_token_ids());
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->has_grammar());
  EXPECT_EQ(c->close(), "\n</think>\n\n");  // as Qwen3.5's template closes a reasoning block
  grammar::ConstraintState st(c, 2);
  st.accept('a');
  st.accept('b');
  ASSERT_TRUE(st.closing());
  std::string forced;
  while (st.closing()) {  // the codec's one-token </think> is the likeliest path; take the first allowed
    const auto mask = st.mask();
    int32_t id = -1;
    for (int32_t i = codec.num_vocab() - 1; i >= 0 && id < 0; --i) {
      if (mask->has(i)) id = i;
    }
    ASSERT_GE(id, 0);
    forced += codec.token_text(id);
    st.accept(id);
  }
  EXPECT_EQ(forced, "\n</think>\n\n");
  EXPECT_EQ(st.mask(), nullptr);
  // With a schema the same budget bounds the reasoning before the constrained answer.
  ChatRequest json = chat(nullptr, RequestJson::parse(R"({"type":"json_object"})"));
  json.params.sampling.thinking_budget = 5;
  const auto with_grammar = build_output_constraint(json, codec, true, codec.eos_token_ids());
  EXPECT_TRUE(with_grammar->has_grammar());
  EXPECT_EQ(with_grammar->close(), "\n</think>\n\n");
}

TEST(OutputConstraint, BadSchemasAre400sNamingTheField) {
  ApiError e = constraint_error(
      chat(nullptr, RequestJson::parse(R"j({"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"(?=x)"}}})j")));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_NE(e.message.find("pattern"), std::string::npos) << e.message;
  ChatRequest bad = chat("required");
  bad.tools[0]["function"]["parameters"]["properties"]["days"]["multipleOf"] = 0.5;
  e = constraint_error(bad);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "tools");
  EXPECT_NE(e.message.find("multipleOf"), std::string::npos) << e.message;
  // tool_choice "auto" never compiles the tools: a schema beyond the subset is fine there.
  bad.tool_choice = "auto";
  EXPECT_EQ(constraint_error(bad).status, 0);
}

// An unknown format is an annotation unless the client said strict: true (the schema's own
// strict for response_format, the function's for a forced call).
TEST(OutputConstraint, UnknownFormatIsA400OnlyWhenStrict) {
  const char* format = R"({"type":"json_schema","json_schema":{"name":"n","strict":STRICT,"schema":
      {"type":"string","format":"iri"}}})";
  auto with_strict = [&](const char* strict) {
    std::string text = format;
    text.replace(text.find("STRICT"), 6, strict);
    return chat(nullptr, RequestJson::parse(text));
  };
  EXPECT_EQ(constraint_error(with_strict("false")).status, 0);
  const ApiError e = constraint_error(with_strict("true"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_NE(e.message.find("'iri' is not supported in strict mode"), std::string::npos) << e.message;
  ChatRequest call = chat(RequestJson::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  call.tools[0]["function"]["parameters"]["properties"]["link"] = RequestJson::parse(R"({"type":"string","format":"iri"})");
  EXPECT_EQ(constraint_error(call).status, 0);
  call.tools[0]["function"]["strict"] = true;
  EXPECT_EQ(constraint_error(call).param, "tools");
  call.tools[0]["function"]["parameters"]["properties"]["link"]["format"] = "uri";  // known: fine when strict
  EXPECT_EQ(constraint_error(call).status, 0);
}

}  // namespace
}  // namespace deltaserve::server
