// Tool calls out of Qwen3.5 (XML) and Qwen3 (JSON) output: the result must not depend on
// how the text is cut, ordinary text is never held longer than it could begin a call, a
// body that is not a call comes back as content byte for byte, and an XML call streams its
// arguments in fragments whose concatenation is the arguments JSON.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "server/request_json.h"
#include "server/tool_call_parser.h"
#include "server/utf8.h"

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
  std::vector<ToolCall> calls;  // the pieces merged: whole calls
};

// Adds one push's output, checking the piece protocol: a call starts once (index, id, name),
// its later pieces carry only fragments of that call, every fragment is valid UTF-8 on its
// own, and no content comes while a call is open.
void add(Result& r, const ToolCallParser::Pieces& p) {
  for (const ToolCallParser::Segment& s : p.segments) {
    if (!s.is_call) {
      EXPECT_TRUE(r.calls.empty() || r.calls.back().ends) << "content inside a call: " << s.content;
      r.content += s.content;
      continue;
    }
    const ToolCall& piece = s.call;
    EXPECT_EQ(sanitize_utf8(piece.arguments), piece.arguments);
    if (piece.starts) {
      EXPECT_TRUE(r.calls.empty() || r.calls.back().ends);
      EXPECT_EQ(piece.index, static_cast<int32_t>(r.calls.size()));
      EXPECT_FALSE(piece.id.empty());
      EXPECT_FALSE(piece.name.empty());
    } else {
      EXPECT_TRUE(piece.id.empty() && piece.name.empty());
      EXPECT_TRUE(!r.calls.empty() && !r.calls.back().ends && r.calls.back().index == piece.index);
    }
    append_call_piece(r.calls, piece);
  }
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
  for (const ToolCall& call : r.calls) EXPECT_TRUE(call.ends) << "finish() left a call open";
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

TEST(ToolCallParser, BodiesThatAreNoCallComeBackAsContent) {
  for (const std::string body :
       {"\n{\"name\": \"ping\"\n", "\nnot a call\n", "\n{\"arguments\": {}}\n",
        "\n{\"name\": \"ping\", \"arguments\": [1]}\n", "\n<function=a<b>\n</function>\n", "<functio>"}) {
    const std::string text = "before\n<tool_call>" + body + "</tool_call> after";
    const Result r = parse_every_way(text);
    EXPECT_EQ(r.content, text) << body;
    EXPECT_TRUE(r.calls.empty()) << body;
  }
}

// Once "<function=NAME>" was read the call has been streamed: it stays a call, a malformed
// rest is dropped and the arguments object is closed.
TEST(ToolCallParser, StartedXmlCallsStayCallsWithClosedArguments) {
  Result r = parse_every_way("before\n<tool_call>\n<function=ping>\n<parameter=x>\nunclosed\n</function>\n</tool_call> after");
  EXPECT_EQ(r.content, "beforeafter");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x":"unclosed\n</function>"})");
  r = parse_every_way("<tool_call>\n<function=ping>\n</function>\ntrailing\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  r = parse_every_way("<tool_call>\n<function=ping>\nnoise <parameter=a>\n1\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  // A parameter named twice keeps its first value.
  r = parse_every_way("<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n<parameter=days>\n1\n"
                      "</parameter>\n<parameter=city>\nB\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"A","days":1})");
}

TEST(ToolCallParser, CallCutShortByTheEndOfOutput) {
  // Before the name is known it is text; after, the call is closed with what was read.
  std::string text = "Sure.\n<tool_call>\n<function=pi";
  Result r = parse_every_way(text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
  r = parse_every_way("Sure.\n<tool_call>\n<function=ping>\n</function>\n");
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  r = parse_every_way("<tool_call>\n<function=get_weather>\n<parameter=city>\nOs");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Os"})");
  r = parse_every_way("<tool_call>\n<function=get_weather>\n<parameter=opts>\n{\"a\": 1}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"opts":{"a":1}})");
  // Cut inside the closing tag (max_tokens, a stop string): the tag's start and the layout
  // newline before it are markup, never part of the value.
  const std::string call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                           "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  for (const std::string tail : {"Paris\n", "Paris\n<", "Paris\n</param", "Paris\n</parameter"}) {
    r = parse_every_way(call.substr(0, call.find("Paris") + tail.size()));
    ASSERT_EQ(r.calls.size(), 1u) << tail;
    EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris"})") << tail;
  }
  for (const std::string tail : {"3\n", "3\n</", "3\n</parameter"}) {
    r = parse_every_way(call.substr(0, call.find("3\n") + tail.size()));
    ASSERT_EQ(r.calls.size(), 1u) << tail;
    EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","days":3})") << tail;
  }
}

TEST(ToolCallParser, ForcedCallsCutBeforeTheirNameAreDroppedNotContent) {
  // tool_choice "required" / a named function: the output is calls only, so a tail cut by
  // max_tokens before the function's name is a cut call, not text.
  const std::string first = "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n";
  for (const std::string tail : {"", "<tool_c", "<tool_call>\n<f", "<tool_call>\n<function=get_w"}) {
    for (size_t cut = 0; cut <= first.size() + tail.size(); ++cut) {
      const std::string text = first + tail;
      ToolCallParser parser(tool_param_types(kTools), /*calls_only=*/true);
      Result r;
      add(r, parser.push(std::string_view(text).substr(0, cut)));
      add(r, parser.push(std::string_view(text).substr(cut)));
      add(r, parser.finish());
      EXPECT_EQ(r.content, "") << tail << " cut " << cut;
      ASSERT_EQ(r.calls.size(), 1u);
      EXPECT_EQ(r.calls[0].name, "ping");
    }
  }
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
  EXPECT_EQ(parser.push("Hello world").content(), "Hello world");
  EXPECT_EQ(parser.push(" and <to").content(), " and");  // " <to" might begin a call
  EXPECT_EQ(parser.push("day>").content(), " <today>");
  EXPECT_EQ(parser.push("\n").content(), "");            // layout until text follows
  EXPECT_EQ(parser.finish().content(), "\n");            // no call: given back
}

TEST(ToolCallParser, IdsAreUnique) {
  std::set<std::string> ids;
  ToolCallParser parser(tool_param_types(kTools));
  for (int i = 0; i < 50; ++i) {
    for (const ToolCall& c : parser.push("<tool_call>{\"name\": \"ping\"}</tool_call>").calls()) {
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

// Random XML calls (string and JSON-typed parameters, multi-byte text, quotes, escapes,
// control bytes, tag look-alikes, invalid JSON in typed parameters, unknown tools and
// parameters, duplicates), cut at every position and in random pieces: the concatenated
// fragments equal the arguments JSON built independently from the whole text.
std::string random_value_text(std::mt19937& rng, bool json_typed) {
  static const std::vector<std::string> kAtoms = {
      "a", "Z", " ", "\n", "\"", "\\", "/", "\t", "\x01", "\x7f", "é", "東京", "🌧", "<", "</", "</param",
      "</parameter", "</tool_cal", ">", "{", "}", "[1, 2]", "\\u00e9", "null", "&lt;", "\r\n"};
  static const std::vector<std::string> kJson = {
      "3", "-12.5e3", "true", "null", "{\"a\": [1, {\"b\": \"東\"}]}", "[\"x\", \"🌧\", 1.5]", "\"quoted \\\" \\u00e9\"",
      "{\"k\":\"</para\"}", "{broken", "12 34", ""};
  if (json_typed && rng() % 3 != 0) return kJson[rng() % kJson.size()];
  std::string v;
  const size_t n = rng() % 12;
  for (size_t i = 0; i < n; ++i) v += kAtoms[rng() % kAtoms.size()];
  return v;
}

struct RandomCall {
  std::string text;      // the model's output
  std::string expected;  // the arguments JSON
  std::string name;
};

RandomCall random_call(std::mt19937& rng) {
  static const std::vector<std::string> kParams = {"city", "days", "units", "opts", "extra", "é名"};
  const bool known_tool = rng() % 4 != 0;
  RandomCall c;
  c.name = known_tool ? "get_weather" : "unknown_tool";
  const ToolParamTypes types = tool_param_types(kTools);
  RequestJson expected = RequestJson::object();
  c.text = "<tool_call>\n<function=" + c.name + ">\n";
  const size_t n = rng() % 5;
  for (size_t i = 0; i < n; ++i) {
    const std::string& pname = kParams[rng() % kParams.size()];
    const bool json_typed = known_tool && types.at("get_weather").contains(pname) && types.at("get_weather").at(pname);
    const std::string value = random_value_text(rng, json_typed);
    if (value.find("</parameter>") != std::string::npos || value.find("</tool_call>") != std::string::npos) continue;
    c.text += "<parameter=" + pname + ">\n" + value + "\n</parameter>\n";
    if (expected.contains(pname)) continue;  // the first value wins
    RequestJson parsed;
    bool decoded = false;
    if (json_typed) {
      try {
        parsed = RequestJson::parse(value);
        decoded = true;
      } catch (const nlohmann::json::exception&) {
      }
    }
    expected[pname] = decoded ? parsed : RequestJson(value);
  }
  c.text += "</function>\n</tool_call>";
  c.expected = expected.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return c;
}

TEST(ToolCallParser, StreamedFragmentsConcatenateToTheArgumentsOverRandomCalls) {
  std::mt19937 rng(20261207);
  for (int round = 0; round < 300; ++round) {
    const RandomCall a = random_call(rng);
    const RandomCall b = random_call(rng);
    const std::string text = "Text é " + a.text + "\n" + b.text;
    // Every single cut, and random cuts into pieces of 1..6 bytes.
    Result r = round % 10 == 0 ? parse_every_way(text) : parse_cuts(text, {});
    for (int k = 0; k < 3; ++k) {
      std::vector<size_t> cuts;
      for (size_t at = 1 + rng() % 6; at < text.size(); at += 1 + rng() % 6) cuts.push_back(at);
      const Result cut = parse_cuts(text, cuts);
      ASSERT_EQ(cut.calls.size(), r.calls.size());
      for (size_t i = 0; i < cut.calls.size(); ++i) EXPECT_EQ(cut.calls[i].arguments, r.calls[i].arguments) << text;
      EXPECT_EQ(cut.content, r.content);
    }
    EXPECT_EQ(r.content, "Text é") << text;
    ASSERT_EQ(r.calls.size(), 2u) << text;
    EXPECT_EQ(r.calls[0].name, a.name);
    EXPECT_EQ(r.calls[0].arguments, a.expected) << a.text;
    EXPECT_EQ(r.calls[1].name, b.name);
    EXPECT_EQ(r.calls[1].arguments, b.expected) << b.text;
    EXPECT_TRUE(RequestJson::parse(r.calls[0].arguments).is_object()) << r.calls[0].arguments;
  }
}

// The pieces arrive while the call is generated: the start before any value, a string value
// as its bytes come (less a possible closing tag and an unfinished character).
TEST(ToolCallParser, XmlArgumentsStreamIncrementally) {
  ToolCallParser parser(tool_param_types(kTools));
  std::vector<ToolCall> calls = parser.push("<tool_call>\n<function=get_weather>").calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].starts);
  EXPECT_FALSE(calls[0].ends);
  EXPECT_EQ(calls[0].arguments, "{");
  calls = parser.push("\n<parameter=city>\nTō\xE4\xBA").calls();  // "Tō" then half of 京
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].starts);
  EXPECT_EQ(calls[0].arguments, "\"city\":\"Tō");
  EXPECT_EQ(parser.push("\xAC\n</para").calls()[0].arguments, "京");  // "\n</para" may end it
  EXPECT_EQ(parser.push("meter>\n<parameter=days>\n1").calls()[0].arguments, "\",\"days\":");  // typed: held
  calls = parser.push("4\n</parameter>\n</function>\n</tool_call>").calls();
  EXPECT_EQ(calls[0].arguments, "14}");
  EXPECT_TRUE(calls[0].ends);
  EXPECT_EQ(parser.num_calls(), 1);
}

}  // namespace
}  // namespace deltaserve::server
