// Forced Qwen XML tool calls: the format the chat template writes and the parser reads.
#include <gtest/gtest.h>

#include "tests/grammar/grammar_test_util.h"

namespace deltaserve::runtime::grammar {
namespace {

using test::accepts;

const SchemaJson& tools() {
  static const SchemaJson t = SchemaJson::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
      "city":{"type":"string"},"days":{"type":"integer"},"unit":{"type":"string","enum":["c","f"]},
      "detail":{"type":"object","properties":{"wind":{"type":"boolean"}},"required":["wind"],"additionalProperties":false}},
      "required":["city","days"],"additionalProperties":false}}},
    {"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}])");
  return t;
}

const std::string kWeather =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    "</function>\n</tool_call>";

TEST(ToolCallGrammar, RequiredTakesOneCallOfAnyTool) {
  const auto g = tool_call_grammar(tools(), std::nullopt, false);
  EXPECT_TRUE(accepts(*g, kWeather));
  EXPECT_TRUE(accepts(*g, "\n\n" + kWeather));
  EXPECT_TRUE(accepts(*g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, kWeather + "\n<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_TRUE(accepts(*g,
                      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York, \xE6\x97\xA5\n</parameter>\n"
                      "<parameter=days>\n-1\n</parameter>\n<parameter=unit>\nf\n</parameter>\n<parameter=detail>\n"
                      "{\"wind\": true}\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, ""));
  EXPECT_FALSE(accepts(*g, "Sure! " + kWeather));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n<function=other>\n</function>\n</tool_call>"));
  // city missing (required), days not an integer, unit outside its enum, '<' in a raw value.
  EXPECT_FALSE(accepts(*g, "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n<parameter=days>\n"
                           "three\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n<parameter=days>\n"
                           "3\n</parameter>\n<parameter=unit>\nk\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n<function=get_weather>\n<parameter=city>\na<b\n</parameter>\n<parameter=days>\n"
                           "3\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, kWeather + " trailing"));
}

TEST(ToolCallGrammar, NamedToolExactlyOneCall) {
  const auto g = tool_call_grammar(tools(), std::string("ping"), false);
  EXPECT_TRUE(accepts(*g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, kWeather));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n<tool_call>\n<function=ping>\n"
                           "</function>\n</tool_call>"));
}

const std::string kPing = "<tool_call>\n<function=ping>\n</function>\n</tool_call>";

TEST(ToolCallGrammar, ParallelRequiredTakesOneOrMoreCallsOfAnyTools) {
  const auto g = tool_call_grammar(tools(), std::nullopt, true);
  EXPECT_TRUE(accepts(*g, kWeather));
  EXPECT_TRUE(accepts(*g, kWeather + "\n" + kPing));
  EXPECT_TRUE(accepts(*g, kPing + "\n" + kWeather + "\n" + kPing));
  EXPECT_FALSE(accepts(*g, ""));
  EXPECT_FALSE(accepts(*g, kWeather + "\n"));             // a separator promises another call
  EXPECT_FALSE(accepts(*g, kWeather + kPing));             // calls are separated by "\n"
  EXPECT_FALSE(accepts(*g, kWeather + "\n\n" + kPing));  // by exactly one
  EXPECT_FALSE(accepts(*g, kWeather + "\ntext"));
  // Every call of the list is checked against its schema (days is not an integer).
  EXPECT_FALSE(accepts(*g, kPing + "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n"
                           "<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"));
}

TEST(ToolCallGrammar, ParallelNamedToolRepeatsOnlyThatFunction) {
  const auto g = tool_call_grammar(tools(), std::string("ping"), true);
  EXPECT_TRUE(accepts(*g, kPing));
  EXPECT_TRUE(accepts(*g, kPing + "\n" + kPing + "\n" + kPing));
  EXPECT_FALSE(accepts(*g, kPing + "\n" + kWeather));
  EXPECT_FALSE(accepts(*g, kWeather));
}

TEST(ToolCallGrammar, BadToolSchemasAreErrors) {
  EXPECT_THROW(tool_call_grammar(SchemaJson::array(), std::nullopt, true), SchemaError);
  EXPECT_THROW(tool_call_grammar(tools(), std::string("nope"), true), SchemaError);
  for (const char* params : {R"({"type":"array"})", R"({"type":"object","properties":{"a":{"type":"string","format":"iri"}}})",
                             R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})", R"("object")",
                             R"({"type":"object","properties":{"a<b":{"type":"string"}}})"}) {
    SchemaJson t = SchemaJson::parse(R"([{"type":"function","function":{"name":"f"}}])");
    t[0]["function"]["parameters"] = SchemaJson::parse(params);
    t[0]["function"]["strict"] = true;
    EXPECT_THROW(tool_call_grammar(t, std::nullopt, true), SchemaError) << params;
  }
}

TEST(ToolCallGrammar, UnknownFormatFailsOnlyAStrictFunction) {
  SchemaJson t = SchemaJson::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"u":{"type":"string","format":"iri"}},"required":["u"]}}}])");
  const auto g = tool_call_grammar(t, std::nullopt, false);
  EXPECT_TRUE(accepts(*g, "<tool_call>\n<function=f>\n<parameter=u>\nany text\n</parameter>\n</function>\n</tool_call>"));
  t[0]["function"]["strict"] = false;
  EXPECT_NO_THROW(tool_call_grammar(t, std::nullopt, false));
  t[0]["function"]["strict"] = true;
  EXPECT_THROW(tool_call_grammar(t, std::nullopt, false), SchemaError);
}

TEST(ToolCallGrammar, UriParameterOfAForcedCall) {
  SchemaJson t = SchemaJson::parse(R"([{"type":"function","function":{"name":"fetch","strict":true,"parameters":{
      "type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"]}}}])");
  const auto g = tool_call_grammar(t, std::string("fetch"), false);
  auto call = [](const std::string& url) {
    return "<tool_call>\n<function=fetch>\n<parameter=url>\n" + url + "\n</parameter>\n</function>\n</tool_call>";
  };
  EXPECT_TRUE(accepts(*g, call("https://example.com/a?b=c#d")));
  EXPECT_FALSE(accepts(*g, call("example.com/a")));
  EXPECT_FALSE(accepts(*g, call("https://exa mple.com")));
}

}  // namespace
}  // namespace deltaserve::runtime::grammar
