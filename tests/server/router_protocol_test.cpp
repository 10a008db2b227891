// Protocol details clients and proxies trip on, at the router (no sockets): the auth scheme
// in any case, HEAD wherever GET goes, absolute-form targets, CORS preflights that allow
// what the browser asks for (the OpenAI SDK's X-Stainless-* headers) and responses that
// expose the headers clients read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/model_loader.h"
#include "server/router.h"
#include "server/server_state.h"

namespace deltaserve::server {
namespace {

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override { start(ServerConfig()); }
  void TearDown() override { stop(); }

  void start(ServerConfig config) {
    stop();
    config.fake_engine = true;
    config_ = std::move(config);
    metrics_ = std::make_unique<ServerMetrics>(MetricsOptions{"fake", false, 10.0, {}});
    state_ = std::make_unique<ServerState>(config_, *metrics_, model_name_);
    model_ = load_fake_model(config_, metrics_.get());
    service_.engine = model_.engine.get();
    service_.codec = model_.codec.get();
    service_.limits = model_.limits;
    state_->publish(&service_);
  }
  void stop() {
    if (model_.engine) {
      model_.engine->begin_drain();
      model_.engine->cancel_all();
      model_ = LoadedModel();
    }
  }

  HttpResponse route(http::verb verb, const std::string& target, const std::string& body = "",
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    HttpRequest req{verb, target, 11};
    req.set(http::field::host, "x");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    Routed routed = route_request(req, *state_);
    EXPECT_TRUE(routed.response.has_value());
    return routed.response ? std::move(*routed.response) : HttpResponse{};
  }

  std::string model_name_ = "fake";
  ServerConfig config_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ServerState> state_;
  ModelService service_;
  LoadedModel model_;
};

const std::string kTokenize = R"({"prompt":"hello"})";

TEST_F(RouterTest, AModelIdWithASlashIsFoundPercentEncoded) {
  // Hugging Face style names; the official clients send the id as one encoded path segment.
  model_name_ = "Qwen/Qwen3.5-Tiny";
  start(ServerConfig());
  for (const char* target : {"/v1/models/Qwen%2FQwen3.5-Tiny", "/v1/models/Qwen%2fQwen3.5-Tiny",
                             "/v1/models/Qwen/Qwen3.5-Tiny"}) {
    const HttpResponse res = route(http::verb::get, target);
    EXPECT_EQ(res.result_int(), 200u) << target;
    EXPECT_NE(res.body().find(R"("id":"Qwen/Qwen3.5-Tiny")"), std::string::npos) << res.body();
  }
  EXPECT_EQ(route(http::verb::get, "/v1/models/Qwen%2FOther").result_int(), 404u);
  EXPECT_EQ(route(http::verb::get, "/v1/models/Qwen%2").result_int(), 404u);  // a cut escape
}

TEST_F(RouterTest, TheBearerSchemeIsCaseInsensitive) {
  ServerConfig c;
  c.api_keys = {"KEY1"};
  start(c);
  for (const char* auth : {"Bearer KEY1", "bearer KEY1", "BEARER KEY1", "bEaReR  KEY1"}) {
    EXPECT_EQ(route(http::verb::post, "/tokenize", kTokenize, {{"Authorization", auth}}).result_int(), 200u) << auth;
  }
  for (const char* auth : {"Bearer key1", "BearerKEY1", "Basic KEY1", "bearer", "KEY1"}) {
    EXPECT_EQ(route(http::verb::post, "/tokenize", kTokenize, {{"Authorization", auth}}).result_int(), 401u) << auth;
  }
}

// Anthropic clients send x-api-key; a request may carry both headers (one meant for a proxy):
// it is let in when either holds a key.
TEST_F(RouterTest, EitherXApiKeyOrBearerMayCarryTheKey) {
  ServerConfig c;
  c.api_keys = {"KEY1"};
  start(c);
  const std::vector<std::vector<std::pair<std::string, std::string>>> good = {
      {{"x-api-key", "KEY1"}},
      {{"Authorization", "Bearer KEY1"}},
      {{"Authorization", "Bearer proxy-token"}, {"x-api-key", "KEY1"}},
      {{"Authorization", "Basic abc"}, {"x-api-key", "KEY1"}},
      {{"Authorization", "Bearer KEY1"}, {"x-api-key", "wrong"}}};
  for (const auto& headers : good) EXPECT_EQ(route(http::verb::post, "/tokenize", kTokenize, headers).result_int(), 200u);
  const std::vector<std::vector<std::pair<std::string, std::string>>> bad = {
      {{"x-api-key", "wrong"}}, {{"x-api-key", ""}}, {{"Authorization", "Bearer x"}, {"x-api-key", "y"}}};
  for (const auto& headers : bad) EXPECT_EQ(route(http::verb::post, "/tokenize", kTokenize, headers).result_int(), 401u);
}

// The error format follows the path, in origin or absolute form (as proxies send it).
TEST_F(RouterTest, AnthropicRoutesAnswerAnthropicErrorsInAnyTargetForm) {
  for (const char* target : {"/v1/messages", "/v1/messages?beta=true", "http://h/v1/messages", "http://h/v1/messages/count_tokens"}) {
    const HttpResponse res = route(http::verb::post, target, "{");
    EXPECT_EQ(res.result_int(), 400u) << target;
    const auto body = nlohmann::json::parse(res.body());
    EXPECT_EQ(body["type"], "error") << target;
    EXPECT_EQ(body["error"]["type"], "invalid_request_error") << target;
  }
  EXPECT_FALSE(nlohmann::json::parse(route(http::verb::post, "http://h/v1/chat/completions", "{").body()).contains("type"));
}

TEST_F(RouterTest, HeadGoesWhereGetGoesWithoutABody) {
  const HttpResponse get = route(http::verb::get, "/health");
  const HttpResponse head = route(http::verb::head, "/health");
  EXPECT_EQ(head.result_int(), 200u);
  EXPECT_TRUE(head.body().empty());
  EXPECT_EQ(head[http::field::content_length], std::to_string(get.body().size()));
  EXPECT_EQ(route(http::verb::head, "/ready").result_int(), 200u);
  EXPECT_EQ(route(http::verb::head, "/metrics").result_int(), 200u);
  EXPECT_EQ(route(http::verb::head, "/v1/models").result_int(), 200u);
  EXPECT_EQ(route(http::verb::head, "/").result_int(), 200u);
  const HttpResponse post = route(http::verb::post, "/health", "{}");
  EXPECT_EQ(post.result_int(), 405u);
  EXPECT_EQ(post[http::field::allow], "GET, HEAD");
}

TEST_F(RouterTest, AbsoluteFormTargetsAreRoutedByTheirPath) {
  EXPECT_EQ(route(http::verb::get, "http://127.0.0.1:8000/health").result_int(), 200u);
  EXPECT_EQ(route(http::verb::get, "HTTP://example.com/v1/models?x=1").result_int(), 200u);
  EXPECT_EQ(route(http::verb::post, "http://h/tokenize", kTokenize).result_int(), 200u);
  EXPECT_EQ(request_path("http://h"), "/");
  EXPECT_EQ(request_path("/v1/models?x"), "/v1/models");
  EXPECT_EQ(route(http::verb::get, "http://h/nope").result_int(), 404u);
}

TEST_F(RouterTest, PreflightEchoesTheRequestedHeaders) {
  ServerConfig c;
  c.cors_allow_origin = "*";
  start(c);
  const std::string asked = "authorization, content-type, x-stainless-os, x-stainless-retry-count";
  const HttpResponse res = route(http::verb::options, "/v1/chat/completions", "",
                                 {{"Origin", "http://other.example"}, {"Access-Control-Request-Method", "POST"},
                                  {"Access-Control-Request-Headers", asked}});
  EXPECT_EQ(res.result_int(), 204u);
  EXPECT_EQ(res[http::field::access_control_allow_origin], "*");
  EXPECT_EQ(res[http::field::access_control_allow_headers], asked);
  EXPECT_NE(std::string(res[http::field::access_control_allow_methods]).find("POST"), std::string::npos);
  // The OpenAI SDK deletes stored responses from a browser too.
  EXPECT_NE(std::string(res[http::field::access_control_allow_methods]).find("DELETE"), std::string::npos);
  // Something that is not a header list is not reflected.
  const HttpResponse odd = route(http::verb::options, "/v1/models", "",
                                 {{"Access-Control-Request-Headers", "x-a; <script>"}});
  EXPECT_EQ(odd[http::field::access_control_allow_headers], "Authorization, Content-Type");
  // Ordinary responses expose the headers clients read.
  const HttpResponse models = route(http::verb::get, "/v1/models");
  EXPECT_NE(std::string(models[http::field::access_control_expose_headers]).find("X-Request-Id"), std::string::npos);
}

TEST_F(RouterTest, PreflightUsesTheConfiguredHeaderList) {
  ServerConfig c;
  c.cors_allow_origin = "https://app.example";
  c.cors_allow_headers = {"Authorization", "Content-Type", "X-Custom"};
  start(c);
  const HttpResponse res = route(http::verb::options, "/v1/models", "",
                                 {{"Access-Control-Request-Headers", "x-stainless-os"}});
  EXPECT_EQ(res[http::field::access_control_allow_headers], "Authorization, Content-Type, X-Custom");
  EXPECT_EQ(res[http::field::access_control_allow_origin], "https://app.example");
}

// The stored /v1/responses, as OpenAI's SDK calls them: retrieve, delete, inputItems.list.
TEST_F(RouterTest, StoredResponsesCanBeRetrievedListedAndDeleted) {
  nlohmann::json items = nlohmann::json::array();
  for (const char* id : {"msg_1", "fc_2", "fco_3"}) items.push_back({{"id", id}, {"type", "message"}});
  state_->response_store().put("resp_a", {RequestJson::array(), R"({"id":"resp_a","object":"response"})", items});
  const HttpResponse got = route(http::verb::get, "/v1/responses/resp_a");
  EXPECT_EQ(got.result_int(), 200u);
  EXPECT_EQ(got.body(), R"({"id":"resp_a","object":"response"})");
  EXPECT_EQ(route(http::verb::get, "/v1/responses/resp_a?stream=true").result_int(), 400u);

  auto list = [&](const std::string& query) {
    const HttpResponse res = route(http::verb::get, "/v1/responses/resp_a/input_items" + query);
    EXPECT_EQ(res.result_int(), 200u) << query;
    return nlohmann::json::parse(res.body());
  };
  nlohmann::json page = list("");  // OpenAI's default order: newest first
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(page["first_id"], "fco_3");
  EXPECT_EQ(page["last_id"], "msg_1");
  EXPECT_EQ(page["has_more"], false);
  page = list("?order=asc&limit=2");
  EXPECT_EQ(page["data"].size(), 2u);
  EXPECT_EQ(page["first_id"], "msg_1");
  EXPECT_EQ(page["has_more"], true);
  page = list("?order=asc&limit=2&after=fc_2");
  EXPECT_EQ(page["data"].size(), 1u);
  EXPECT_EQ(page["data"][0]["id"], "fco_3");
  EXPECT_EQ(page["has_more"], false);
  for (const char* bad : {"?limit=0", "?limit=101", "?limit=x", "?order=up", "?after=nope"}) {
    const HttpResponse res = route(http::verb::get, std::string("/v1/responses/resp_a/input_items") + bad);
    EXPECT_EQ(res.result_int(), 400u) << bad;
  }
  EXPECT_EQ(route(http::verb::post, "/v1/responses/resp_a", "{}").result_int(), 405u);
  EXPECT_EQ(route(http::verb::delete_, "/v1/responses/resp_a/input_items").result_int(), 405u);

  const HttpResponse deleted = route(http::verb::delete_, "/v1/responses/resp_a");
  EXPECT_EQ(deleted.result_int(), 200u);
  EXPECT_EQ(nlohmann::json::parse(deleted.body()),
            nlohmann::json({{"id", "resp_a"}, {"object", "response"}, {"deleted", true}}));
  for (const auto& [verb, target] : std::vector<std::pair<http::verb, std::string>>{
           {http::verb::get, "/v1/responses/resp_a"},
           {http::verb::get, "/v1/responses/resp_a/input_items"},
           {http::verb::delete_, "/v1/responses/resp_a"},
           {http::verb::get, "/v1/responses/never"}}) {
    const HttpResponse res = route(verb, target);
    EXPECT_EQ(res.result_int(), 404u) << target;
    const nlohmann::json error = nlohmann::json::parse(res.body())["error"];
    EXPECT_EQ(error["type"], "invalid_request_error") << target;
    EXPECT_NE(error["message"].get<std::string>().find("not found"), std::string::npos) << target;
  }
}

TEST_F(RouterTest, StoredResponsesNeedTheApiKey) {
  ServerConfig c;
  c.api_keys = {"k"};
  start(c);
  state_->response_store().put("resp_a", {RequestJson::array(), "{}", nlohmann::json::array()});
  EXPECT_EQ(route(http::verb::get, "/v1/responses/resp_a").result_int(), 401u);
  EXPECT_EQ(route(http::verb::delete_, "/v1/responses/resp_a").result_int(), 401u);
  EXPECT_EQ(route(http::verb::get, "/v1/responses/resp_a", "", {{"Authorization", "Bearer k"}}).result_int(), 200u);
}

TEST(ProcessMetrics, ScrapeHasProcessSeriesAndHttpResponseCounts) {
  ServerMetrics metrics({"fake", false, 10.0, {}});
  metrics.on_http_response("/health", 200);
  metrics.on_http_response("/health", 200);
  metrics.on_http_response("other", 404);
  const std::string text = metrics.render(nullptr, false);
  for (const char* name : {"process_resident_memory_bytes ", "process_virtual_memory_bytes ", "process_open_fds ",
                           "process_max_fds ", "process_cpu_seconds_total ", "process_start_time_seconds ",
                           "deltaserve_http_responses_total{route=\"/health\",status=\"200\"} 2",
                           "deltaserve_http_responses_total{route=\"other\",status=\"404\"} 1"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  const size_t at = text.find("\nprocess_resident_memory_bytes ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(text.substr(at + 31)), 1e6);  // a real RSS, in bytes
}

TEST(RouteLabel, IsABoundedSet) {
  EXPECT_EQ(route_label("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(route_label("/v1/models/abc"), "/v1/models/{id}");
  EXPECT_EQ(route_label("/v1/responses/resp_1"), "/v1/responses/{id}");
  EXPECT_EQ(route_label("/v1/responses/resp_1/input_items"), "/v1/responses/{id}/input_items");
  EXPECT_EQ(route_label("/v1/tokenize"), "/tokenize");
  EXPECT_EQ(route_label("/static/chat.js"), "/static");
  EXPECT_EQ(route_label("/anything/else/12345"), "other");
}

}  // namespace
}  // namespace deltaserve::server
