// Error bodies as OpenAI's and Anthropic's clients read them, and the bounded metric label
// each status counts under (dashboards and alert rules read that label, not the body).
#include <gtest/gtest.h>

#include "server/anthropic_wire.h"
#include "server/api_error.h"

namespace deltaserve::server {
namespace {

TEST(ApiError, BodiesUseOpenAisTypesAndCodes) {
  const nlohmann::json auth = unauthorized("Incorrect API key provided.").body()["error"];
  EXPECT_EQ(auth["type"], "invalid_request_error");
  EXPECT_EQ(auth["code"], "invalid_api_key");
  EXPECT_TRUE(auth["param"].is_null());

  const nlohmann::json model = not_found("model_not_found", "The model 'x' does not exist.").body()["error"];
  EXPECT_EQ(model["type"], "invalid_request_error");
  EXPECT_EQ(model["code"], "model_not_found");
  EXPECT_EQ(not_found("unknown_url", "No route.").body()["error"]["type"], "invalid_request_error");

  const ApiError loading = not_ready("model_loading", "The model is still loading.", 5);
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.body()["error"]["type"], "service_unavailable_error");
  EXPECT_EQ(loading.body()["error"]["code"], "model_loading");

  EXPECT_EQ(queue_full("The server is at capacity.", 1).body()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(internal_error("boom").body()["error"]["type"], "server_error");
}

TEST(ApiError, MetricLabelIsTheStatusClassNotTheBodyType) {
  EXPECT_STREQ(invalid_value("temperature", "too hot").metric_label(), "invalid_request_error");
  EXPECT_STREQ(method_not_allowed("GET", "/v1/chat/completions").metric_label(), "invalid_request_error");
  EXPECT_STREQ(payload_too_large(10).metric_label(), "invalid_request_error");
  EXPECT_STREQ(unauthorized("no key").metric_label(), "authentication_error");
  EXPECT_STREQ(not_found("model_not_found", "no model").metric_label(), "not_found_error");
  EXPECT_STREQ(queue_full("full", 1).metric_label(), "rate_limit_error");
  EXPECT_STREQ(not_ready("server_draining", "draining", 1).metric_label(), "service_unavailable_error");
  EXPECT_STREQ(internal_error("boom").metric_label(), "server_error");
}

TEST(ApiError, AnthropicRoutesKeepAnthropicsTypes) {
  EXPECT_EQ(anthropic_error_json(unauthorized("no key"))["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_json(not_found("model_not_found", "no model"))["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_error_json(not_ready("model_loading", "loading", 1))["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error_json(invalid_value("x", "y"))["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace deltaserve::server
