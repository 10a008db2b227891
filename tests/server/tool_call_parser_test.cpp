// Tool calls out of Qwen3.5 (XML) and Qwen3 (JSON) output: the result must not depend on
// how the text is cut, ordinary text is never held longer than it could begin a call, and
// a broken or unterminated call comes back as content byte for byte.
#include <gtest/gtest.h>

#include <set>

#include "server/request_json.h"
#include "server/tool_call_parser.h"

namespace deltaserve::server {
namespace {

const RequestJson kTools = RequestJson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"type": ["string", "null"]}, "opts": {"type": "object"}}}}},
  {"type": "function", "function": {"name": "ping"}}
])");

struct Result {
  std::string content;
  std::vector<ToolCall> calls;
};

void add(Result& r, ToolCallParser::Pieces p) {
  r.content += p.content;
  for (ToolCall& c : p.calls) r.calls.push_back(std::move(c));
}

// Runs `text` through a parser cut at the given positions (sorted).
Result parse_cuts(const std::string& text, const std::vector<size_t>& cuts) {
  ToolCallParser parser(tool_param_types(kTools));
  Result r;
  size_t from = 0;
  for (size_t cut : cuts) {
    add(r, parser.push(std::string_view(text).substr(from, cut - from)));
    from = cut;
  }
  add(r, parser.push(std::string_view(text).substr(from)));
  add(r, parser.finish());
  return r;
}

// Same result for one piece, every single cut, and every piece size.
Result parse_every_way(const std::string& text) {
  const Result whole = parse_cuts(text, {});
  auto same = [&](const Result& r, const std::string& how) {
    EXPECT_EQ(r.content, whole.content) << how;
    ASSERT_EQ(r.calls.size(), whole.calls.size()) << how;
    for (size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, whole.calls[i].name) << how;
      EXPECT_EQ(r.calls[i].arguments, whole.calls[i].arguments) << how;
      EXPECT_EQ(r.calls[i].index, static_cast<int32_t>(i)) << how;
    }
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) same(parse_cuts(text, {cut}), "cut " + std::to_string(cut));
  for (size_t step = 1; step <= 7; ++step) {
    std::vector<size_t> cuts;
    for (size_t at = step; at < text.size(); at += step) cuts.push_back(at);
    same(parse_cuts(text, cuts), "step " + std::to_string(step));
  }
  return whole;
}

TEST(ToolCallParser, Qwen35XmlCallWithTypedParameters) {
  const Result r = parse_every_way(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=units>\n42\n</parameter>\n"
      "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  // city and units are strings by schema; days and opts are decoded.
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","days":3,"units":"42","opts":{"a":[1,2]}})");
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.calls[0].id.size(), 5u + 24u);
}

TEST(ToolCallParser, XmlValueThatIsNotJsonStaysAString) {
  const Result r = parse_every_way(
      "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n"
      "<parameter=city>\nline one\nline two\n</parameter>\n<parameter=extra>\n7\n</parameter>\n"
      "</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  // Unknown parameters (not in the schema) stay strings.
  EXPECT_EQ(r.calls[0].arguments, R"({"days":"three","city":"line one\nline two","extra":"7"})");
}

TEST(ToolCallParser, Qwen3JsonCall) {
  const Result r = parse_every_way(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","days":2})");
}

TEST(ToolCallParser, JsonCallWithoutArgumentsOrWithStringArguments) {
  Result r = parse_every_way("<tool_call>{\"name\": \"ping\"}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  r = parse_every_way(R"(<tool_call>{"name": "ping", "arguments": "{\"x\": 1}"}</tool_call>)");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x":1})");
}

TEST(ToolCallParser, TextBeforeAndAfterAndTwoCalls) {
  const Result r = parse_every_way(
      "Let me check both.\n\n<tool_call>\n<function=ping>\n</function>\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n"
      "\nDone.\n");
  EXPECT_EQ(r.content, "Let me check both.Done.\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "ping");
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.calls[1].name, "get_weather");
  EXPECT_EQ(r.calls[1].arguments, R"({"city":"Rome"})");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
}

TEST(ToolCallParser, TrailingLayoutAfterCallsIsDropped) {
  const Result r = parse_every_way("<tool_call>\n<function=ping>\n</function>\n</tool_call>\n\n");
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.calls.size(), 1u);
}

TEST(ToolCallParser, MalformedCallsComeBackAsContent) {
  for (const std::string body :
       {"\n<function=ping>\n<parameter=x>\nunclosed\n</function>\n", "\n{\"name\": \"ping\"\n",
        "\nnot a call\n", "\n{\"arguments\": {}}\n", "\n<function=ping>\n</function>\ntrailing\n",
        "\n{\"name\": \"ping\", \"arguments\": [1]}\n"}) {
    const std::string text = "before\n<tool_call>" + body + "</tool_call> after";
    const Result r = parse_every_way(text);
    EXPECT_EQ(r.content, text) << body;
    EXPECT_TRUE(r.calls.empty()) << body;
  }
}

TEST(ToolCallParser, UnterminatedCallAtTheEndIsContent) {
  const std::string text = "Sure.\n<tool_call>\n<function=ping>\n</function>\n";
  const Result r = parse_every_way(text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallParser, LiteralTagLookalikesInTextArePassedThrough) {
  const std::string text = "Use <tool or <tool_c> or <tool_call (no) and a < b, <toolbox>.";
  const Result r = parse_every_way(text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallParser, UnicodeInTextAndArguments) {
  const Result r = parse_every_way(
      "Météo à 東京 🌧\n<tool_call>\n<function=get_weather>\n<parameter=city>\n東京\n</parameter>\n"
      "</function>\n</tool_call>");
  EXPECT_EQ(r.content, "Météo à 東京 🌧");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"東京"})");
}

TEST(ToolCallParser, OrdinaryTextIsNotHeldBack) {
  ToolCallParser parser(tool_param_types(kTools));
  EXPECT_EQ(parser.push("Hello world").content, "Hello world");
  EXPECT_EQ(parser.push(" and <to").content, " and");  // " <to" might begin a call
  EXPECT_EQ(parser.push("day>").content, " <today>");
  EXPECT_EQ(parser.push("\n").content, "");            // layout until text follows
  EXPECT_EQ(parser.finish().content, "\n");            // no call: given back
}

TEST(ToolCallParser, IdsAreUnique) {
  std::set<std::string> ids;
  ToolCallParser parser(tool_param_types(kTools));
  for (int i = 0; i < 50; ++i) {
    for (const ToolCall& c : parser.push("<tool_call>{\"name\": \"ping\"}</tool_call>").calls) {
      ids.insert(c.id);
    }
  }
  EXPECT_EQ(ids.size(), 50u);
  EXPECT_EQ(parser.num_calls(), 50);
}

TEST(ToolCallParser, DeepJsonIsNotDecoded) {
  const std::string deep(1000, '[');
  const Result r = parse_cuts("<tool_call>\n<function=get_weather>\n<parameter=opts>\n" + deep +
                                  "\n</parameter>\n</function>\n</tool_call>",
                              {});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"opts":")" + deep + R"("})");
}

}  // namespace
}  // namespace deltaserve::server
