// The JSON limits of untrusted bodies (request_json.h): nesting and value count are checked
// while parsing, so a nesting bomb stops at the limit (400 naming it) in microseconds
// instead of being built; and the fields the server ignores are still type-checked.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "server/openai_schema.h"
#include "server/request_json.h"

namespace deltaserve::server {
namespace {

ApiError error_of(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const ApiException& e) {
    return e.error;
  }
  return ApiError{0, "", "", "", "", 0};
}

ApiError chat_error(const std::string& body, const SchemaLimits& limits = {}) {
  return error_of([&] { (void)parse_chat_request(body, limits); });
}

const std::string kMessages = R"("messages":[{"role":"user","content":"hi"}])";

TEST(JsonLimits, AFourMillionDeepBodyUnderAnIgnoredFieldStopsAtTheDepthLimit) {
  const std::string body = "{" + kMessages + ",\"metadata\":" + std::string(4'000'000, '[');
  const auto start = std::chrono::steady_clock::now();
  const ApiError e = chat_error(body);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "json_too_deep");
  EXPECT_NE(e.message.find("128"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("--max-json-depth"), std::string::npos) << e.message;
  // It stops after 128 levels: far below the seconds a full parse takes (bar with margin
  // for sanitizer builds and a loaded machine).
  EXPECT_LT(ms, 500.0);
}

TEST(JsonLimits, DeepObjectsAndTheExactLimit) {
  SchemaLimits limits;
  limits.json.max_depth = 8;
  auto nested = [](int levels) {  // `levels` objects, the outermost the body itself
    std::string s;
    for (int i = 0; i < levels; ++i) s += "{\"a\":";
    s += "1";
    for (int i = 0; i < levels; ++i) s += "}";
    return s;
  };
  // The body is level 1, chat_template_kwargs level 2: 8 levels in all parse.
  EXPECT_EQ(chat_error("{" + kMessages + ",\"chat_template_kwargs\":" + nested(7) + "}", limits).status, 0);
  const ApiError e = chat_error("{" + kMessages + ",\"chat_template_kwargs\":" + nested(8) + "}", limits);
  EXPECT_EQ(e.code, "json_too_deep");
  EXPECT_EQ(e.param, "body");
}

TEST(JsonLimits, TooManyValuesIsA400NamingTheLimit) {
  SchemaLimits limits;
  limits.json.max_elements = 1000;
  std::string ids = "[";
  for (int i = 0; i < 5000; ++i) ids += (i ? ",1" : "1");
  ids += "]";
  ApiError e = error_of([&] { (void)parse_completion_request("{\"prompt\":" + ids + "}", limits); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "json_too_large");
  EXPECT_NE(e.message.find("1000"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("--max-json-elements"), std::string::npos) << e.message;
  limits.json.max_elements = 6000;
  e = error_of([&] { (void)parse_completion_request("{\"prompt\":" + ids + "}", limits); });
  EXPECT_EQ(e.status, 0) << e.message;
}

TEST(JsonLimits, ToolCallArgumentsStringsAreBoundedToo) {
  // `arguments` is JSON inside a string, parsed with the same default limits: a nesting bomb
  // there stops at the limit and, not being an object, stays a string.
  const std::string deep = std::string(1'000'000, '[');
  const std::string body = R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function",)"
                           R"("function":{"name":"f","arguments":")" + deep + R"("}}]}]})";
  const auto start = std::chrono::steady_clock::now();
  const ApiError e = chat_error(body);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(e.status, 0) << e.message;
  EXPECT_LT(ms, 500.0);
}

TEST(JsonLimits, ParseRequestJsonDefaultsHold) {
  EXPECT_EQ(error_of([] { (void)parse_request_json(std::string(129, '[') + std::string(129, ']')); }).code,
            "json_too_deep");
  EXPECT_EQ(error_of([] { (void)parse_request_json(std::string(128, '[') + std::string(128, ']')); }).status, 0);
}

TEST(IgnoredFields, AreTypeChecked) {
  for (const char* field : {R"("user":5)", R"("metadata":"x")", R"("store":"yes")", R"("metadata":{"k":1})",
                            R"("service_tier":1)", R"("parallel_tool_calls":"no")", R"("prompt_cache_key":[])",
                            R"("safety_identifier":{})", R"("priority":"high")", R"("request_id":7)"}) {
    const ApiError e = chat_error("{" + kMessages + "," + field + "}");
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.type, "invalid_request_error") << field;
  }
  const ApiError ok = chat_error("{" + kMessages + R"(,"user":"u","metadata":{"k":"v"},"store":false,)"
                                 R"("service_tier":"auto","parallel_tool_calls":true,"priority":0})");
  EXPECT_EQ(ok.status, 0) << ok.message;
}

}  // namespace
}  // namespace deltaserve::server
