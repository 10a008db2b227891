// From the request body to the rendered prompt with Qwen3.5's real chat template: a tool
// schema and tool-call arguments keep the client's key order (as transformers renders them),
// where a sorted JSON map would reorder them and change the prompt.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/tokenizer/tokenizer.h"
#include "server/openai_schema.h"
#include "server/request_json.h"
#include "server/tokenizer_codec.h"

namespace deltaserve::server {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const TokenizerCodec& qwen35_codec() {
  static const TokenizerCodec codec(
      runtime::Tokenizer::from_json_file("tests/fixtures/qwen3_tokenizer/tokenizer.json"),
      read_file("tests/fixtures/chat_templates/qwen3_5.jinja"));
  return codec;
}

std::string render(const ChatRequest& r) {
  ChatTemplateInput input;
  input.messages = r.messages;
  input.tools = r.tools;
  input.kwargs = r.chat_template_kwargs;
  input.add_generation_prompt = r.add_generation_prompt;
  return qwen35_codec().apply_chat_template(input);
}

// Keys deliberately out of alphabetical order at every level.
constexpr const char* kToolsBody = R"({
  "messages": [{"role": "user", "content": "weather?"}],
  "tools": [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object",
                   "properties": {"zone": {"type": "string"}, "city": {"type": "string"}},
                   "required": ["zone"]},
    "description": "Look the weather up"}}]
})";

TEST(TokenizerCodec, ToolSchemaKeepsTheClientsKeyOrder) {
  const ChatRequest r = parse_chat_request(kToolsBody, SchemaLimits{});
  const std::string prompt = render(r);
  // Python: json.dumps(tool, ensure_ascii=False) over the dict as the client sent it.
  const std::string expected =
      R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
      R"("properties": {"zone": {"type": "string"}, "city": {"type": "string"}}, "required": ["zone"]}, )"
      R"("description": "Look the weather up"}})";
  EXPECT_NE(prompt.find(expected), std::string::npos) << prompt;
}

TEST(TokenizerCodec, ToolCallArgumentsKeepTheClientsKeyOrder) {
  // Arguments as a JSON string (OpenAI's form) and as an object: both in the sent order.
  for (const char* arguments : {R"("{\"zone\": \"CET\", \"city\": \"Paris\"}")",
                                R"({"zone": "CET", "city": "Paris"})"}) {
    const std::string body = std::string(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": )") + arguments + R"(}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})";
    const std::string prompt = render(parse_chat_request(body, SchemaLimits{}));
    const size_t zone = prompt.find("<parameter=zone>");
    const size_t city = prompt.find("<parameter=city>");
    ASSERT_NE(zone, std::string::npos) << prompt;
    ASSERT_NE(city, std::string::npos) << prompt;
    EXPECT_LT(zone, city) << prompt;
  }
}

TEST(RequestJson, KeepsOrderAndTheLastDuplicate) {
  const RequestJson j = parse_request_json(R"({"b": 1, "a": {"z": [1, {"y": 2, "x": 3}], "c": null}, "b": 4})");
  EXPECT_EQ(j.dump(), R"({"b":4,"a":{"z":[1,{"y":2,"x":3}],"c":null}})");
  EXPECT_THROW(parse_request_json(R"({"a": 1e999})"), ApiException);
  EXPECT_THROW(parse_request_json("{\"a\": \"\xff\"}"), ApiException);
  EXPECT_THROW(parse_request_json(R"({"a": 1} x)"), ApiException);
  EXPECT_THROW(parse_request_json(""), ApiException);
}

TEST(RequestJson, ManyKeysParseInLinearTime) {
  // 200,000 distinct keys in one object, then a duplicate of the first: a linear search per
  // key (nlohmann::ordered_json::parse) would take minutes; this takes milliseconds.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  text += "\"k0\":-1}";
  const RequestJson j = parse_request_json(text);
  ASSERT_EQ(j.size(), 200000u);
  EXPECT_EQ(j.begin().key(), "k0");
  EXPECT_EQ(j.begin().value(), -1);
  EXPECT_EQ((--j.end()).key(), "k199999");
}

TEST(TokenizerCodec, TokenTextIsThePiecesRawBytesForLogprobs) {
  // Byte-level BPE splits a 4-byte character over tokens; logprobs' `bytes` must carry each
  // token's own bytes (joined, they give the character), not a replacement character.
  const std::string clef = "\xF0\x9D\x84\x9E";  // U+1D11E, musical G clef
  const std::vector<int32_t> ids = qwen35_codec().encode(clef, false);
  ASSERT_GT(ids.size(), 1u);
  std::string joined;
  for (const int32_t id : ids) joined += qwen35_codec().token_text(id);
  EXPECT_EQ(joined, clef);
  EXPECT_EQ(qwen35_codec().token_text(qwen35_codec().encode("hello", false)[0]), "hello");
}

}  // namespace
}  // namespace deltaserve::server
