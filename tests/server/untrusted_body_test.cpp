// Bodies found by the soak and the request fuzzer (tests/fuzz/request_fuzz.cpp): each must
// end as an ApiException with a 400 whose error body serialises, never as another exception
// (which the session turns into a 500).
#include <gtest/gtest.h>

#include <string>

#include "server/openai_schema.h"

namespace deltaserve::server {
namespace {

// The error of a chat body, or status 0 when it parsed; any other exception fails the test.
ApiError chat_error(const std::string& body) {
  try {
    parse_chat_request(body, SchemaLimits{});
  } catch (const ApiException& e) {
    return e.error;
  }
  return ApiError{0, "", "", "", "", 0};
}

TEST(UntrustedBody, InvalidUtf8IsA400WithASerialisableBody) {
  const ApiError e = chat_error("{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xC3\x28\"}]}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  std::string text;
  EXPECT_NO_THROW(text = e.body_text());  // the parser's message quotes the bad bytes
  EXPECT_NE(text.find("invalid_json"), std::string::npos);
}

TEST(UntrustedBody, InvalidUtf8InAKeyIsA400) {
  const ApiError e = chat_error("{\"messages\":[{\"ro\xE9le\":\"user\",\"content\":\"hi\"}]}");
  EXPECT_EQ(e.status, 400);
  EXPECT_NO_THROW((void)e.body_text());
}

TEST(UntrustedBody, NumberOverflowIsA400) {
  // nlohmann reports 1e999 as out_of_range (406), not as a parse_error.
  const ApiError e = chat_error(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1e999})");
  EXPECT_EQ(e.status, 400);
  EXPECT_NO_THROW((void)e.body_text());
}

TEST(UntrustedBody, NumberOverflowInACompletionPromptIsA400) {
  try {
    parse_completion_request(R"({"prompt":[1e400]})", SchemaLimits{});
    FAIL() << "parsed";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
  }
}

}  // namespace
}  // namespace deltaserve::server
