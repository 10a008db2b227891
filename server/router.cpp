#include "server/router.h"

#include <algorithm>
#include <vector>

#include "server/agent_routes.h"
#include "server/anthropic_wire.h"
#include "server/openai_response.h"
#include "server/replica_engine.h"
#include "server/static_files.h"

namespace deltaserve::server {
namespace {

constexpr std::string_view kServerName = "deltaserve";
// Response headers a browser client may read across origins (the OpenAI SDKs read these).
constexpr std::string_view kExposedHeaders = "X-Request-Id, Retry-After, WWW-Authenticate";
// Headers a preflight allows when --cors-allow-headers is empty and the browser names none.
constexpr std::string_view kDefaultAllowedHeaders = "Authorization, Content-Type";

// A request's Access-Control-Request-Headers, echoed only when it is a plain list of
// header names (tokens, commas, spaces), so nothing odd is reflected into the response.
bool is_header_name_list(std::string_view list) {
  if (list.empty() || list.size() > 4096) return false;
  for (const char c : list) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == ',' || c == ' ' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// OPTIONS with --cors-allow-origin: the configured header list, else whatever the browser
// asks for (the OpenAI SDK sends X-Stainless-* headers), so cross-origin clients work.
HttpResponse preflight_response(const HttpRequest& request, const ServerState& state) {
  HttpResponse res = json_response(http::status::no_content, "", request, state);
  res.set(http::field::access_control_allow_methods, "GET, POST, DELETE, OPTIONS");
  std::string allowed;
  for (const std::string& header : state.config().cors_allow_headers) {
    allowed += (allowed.empty() ? "" : ", ") + header;
  }
  if (allowed.empty()) {
    const auto asked = request.find(http::field::access_control_request_headers);
    const std::string_view list = asked == request.end() ? std::string_view()
                                                         : std::string_view(asked->value().data(), asked->value().size());
    allowed = is_header_name_list(list) ? std::string(list) : std::string(kDefaultAllowedHeaders);
    res.set(http::field::vary, "Access-Control-Request-Headers");
  }
  res.set(http::field::access_control_allow_headers, allowed);
  res.set(http::field::access_control_max_age, "600");
  return res;
}

// Constant-time comparison, so the time to reject a key says nothing about its prefix.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The key of "Bearer KEY"; empty when the value is not a bearer credential.
std::string_view bearer_token(std::string_view value) {
  // The auth scheme is case-insensitive (RFC 9110 11.1): "bearer KEY" is as good as "Bearer KEY".
  constexpr std::string_view kBearer = "bearer";
  if (value.size() <= kBearer.size() || !boost::beast::iequals(value.substr(0, kBearer.size()), kBearer) ||
      (value[kBearer.size()] != ' ' && value[kBearer.size()] != '\t')) {
    return {};
  }
  value.remove_prefix(kBearer.size());
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  return value;
}

// Either header may carry the key: Anthropic clients send x-api-key, and some (Claude Code
// with both an auth token and an API key set) send both, one of them meant for another hop.
bool authorized(const HttpRequest& request, const ServerState& state) {
  const auto& keys = state.config().api_keys;
  if (keys.empty()) return true;
  std::vector<std::string_view> presented;
  if (const auto header = request.find(http::field::authorization); header != request.end()) {
    presented.push_back(bearer_token(std::string_view(header->value().data(), header->value().size())));
  }
  if (const auto api_key = request.find("x-api-key"); api_key != request.end()) {
    presented.emplace_back(api_key->value().data(), api_key->value().size());
  }
  bool ok = false;
  for (const std::string_view value : presented) {
    if (value.empty()) continue;
    for (const std::string& key : keys) ok = same_secret(value, key) || ok;
  }
  return ok;
}

bool needs_auth(std::string_view path) {
  return path.rfind("/v1/", 0) == 0 || path == "/v1" || path == "/tokenize" || path == "/detokenize";
}

// Readiness for endpoints that need the model.
const ModelService* ready_service(const ServerState& state) {
  const int retry = state.config().retry_after_s;
  switch (state.phase()) {
    case ServerPhase::Loading:
      throw ApiException{not_ready("model_loading", "The model is still loading.", retry)};
    case ServerPhase::Draining:
      throw ApiException{not_ready("server_draining", "The server is shutting down.", retry)};
    case ServerPhase::Ready: break;
  }
  return state.service();
}

nlohmann::json model_card(const ServerState& state) {
  nlohmann::json card = {{"id", state.model_name()},
                         {"object", "model"},
                         {"created", state.created_unix_s()},
                         {"owned_by", "deltaserve"}};
  if (const ModelService* s = state.service()) card["max_model_len"] = s->limits.context_tokens;
  return card;
}

HttpResponse handle_ready(const HttpRequest& req, ServerState& state) {
  switch (state.phase()) {
    case ServerPhase::Ready:
      return json_response(http::status::ok, R"({"status":"ready"})", req, state);
    case ServerPhase::Loading:
      return error_response(not_ready("model_loading", "The model is still loading.",
                                      state.config().retry_after_s), &req, state);
    case ServerPhase::Draining: break;
  }
  return error_response(not_ready("server_draining", "The server is shutting down.",
                                  state.config().retry_after_s), &req, state);
}

HttpResponse handle_metrics(const HttpRequest& req, ServerState& state) {
  const ModelService* service = state.service();
  scheduler::EngineStats stats;
  std::vector<scheduler::EngineStats> per_engine;
  if (service) {
    // Replicas: the daemon's totals are the sum of the same snapshots, so the two agree.
    per_engine = service->engine->replica_stats();
    if (per_engine.empty()) stats = service->engine->stats();
    for (const scheduler::EngineStats& s : per_engine) add_engine_stats(stats, s);
  }
  HttpResponse res{http::status::ok, req.version()};
  res.set(http::field::server, kServerName);
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.keep_alive(keep_alive_after(req, state));
  res.body() = state.metrics().render(service ? &stats : nullptr, state.phase() == ServerPhase::Ready, per_engine);
  res.prepare_payload();
  return res;
}

// A path segment with its %XX escapes decoded; a malformed escape stays as it is.
std::string percent_decode(std::string_view text) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The parameters of a target's query ("a=1&b=x%20y"), decoded; the last of a repeated key wins.
QueryParams query_params(std::string_view target) {
  QueryParams params;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return params;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const std::string_view pair = rest.substr(0, rest.find('&'));
    rest.remove_prefix(std::min(rest.size(), pair.size() + 1));
    const size_t eq = pair.find('=');
    params[percent_decode(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1));
  }
  return params;
}

// /v1/responses/{id} (GET, DELETE) and /v1/responses/{id}/input_items (GET): the store of
// finished responses (agent_routes.h).
HttpResponse handle_stored_response(const HttpRequest& req, ServerState& state, std::string_view path) {
  constexpr std::string_view kItems = "/input_items";
  std::string_view rest = path.substr(std::string_view("/v1/responses/").size());
  const bool items = rest.ends_with(kItems);
  if (items) rest.remove_suffix(kItems.size());
  const std::string id = percent_decode(rest);
  if (id.empty() || rest.find('/') != std::string_view::npos) {
    return error_response(
        not_found("unknown_url", "No route for " + std::string(req.method_string()) + " " + std::string(path) + "."), &req,
        state);
  }
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  const QueryParams query = query_params(std::string_view(req.target().data(), req.target().size()));
  if (get) {
    return json_response(http::status::ok, items ? input_items_body(id, query, state) : stored_response_body(id, query, state),
                         req, state);
  }
  if (!items && req.method() == http::verb::delete_) {
    return json_response(http::status::ok, deleted_response_body(id, state), req, state);
  }
  HttpResponse res = error_response(
      method_not_allowed(std::string(req.method_string()), std::string(req.target())), &req, state);
  res.set(http::field::allow, items ? "GET, HEAD" : "GET, HEAD, DELETE");
  return res;
}

HttpResponse handle_models(const HttpRequest& req, ServerState& state, std::string_view encoded_id) {
  // The official clients encode the id as one path segment: "org/name" comes as "org%2Fname".
  const std::string id = percent_decode(encoded_id);
  if (id.empty()) {
    const nlohmann::json body = {{"object", "list"}, {"data", nlohmann::json::array({model_card(state)})}};
    return json_response(http::status::ok, json_text(body), req, state);
  }
  if (id != state.model_name()) {
    return error_response(not_found("model_not_found", "The model '" + id +
                                                           "' does not exist."), &req, state);
  }
  return json_response(http::status::ok, json_text(model_card(state)), req, state);
}

HttpResponse handle_tokenize(const HttpRequest& req, ServerState& state) {
  const ModelService* service = ready_service(state);
  const TokenizeRequest t = parse_tokenize_request(req.body(), state.schema_limits());
  std::vector<int32_t> ids;
  if (t.chat) {
    ids = service->codec->encode(render_chat_prompt(*t.chat, state, *service), false);
  } else {
    ids = service->codec->encode(*t.prompt, t.add_special_tokens);
  }
  const nlohmann::json body = {{"tokens", ids},
                               {"count", ids.size()},
                               {"max_model_len", service->limits.context_tokens}};
  return json_response(http::status::ok, json_text(body), req, state);
}

HttpResponse handle_detokenize(const HttpRequest& req, ServerState& state) {
  const ModelService* service = ready_service(state);
  const DetokenizeRequest d = parse_detokenize_request(req.body(), state.schema_limits());
  const nlohmann::json body = {{"prompt", service->codec->decode(d.tokens, false)}};
  return json_response(http::status::ok, json_text(body), req, state);
}

// POST /v1/cache/reset (behind the API key like all of /v1): every cached prefix dropped; the
// body reports what the cache holds afterwards (nothing, unless requests were running).
HttpResponse handle_cache_reset(const HttpRequest& req, ServerState& state) {
  const ModelService* service = ready_service(state);
  if (!service->engine->reset_prefix_cache(std::chrono::seconds(30)))
    throw ApiException{not_ready("cache_reset_timeout", "the engine did not apply the cache reset in time", state.config().retry_after_s)};
  const scheduler::EngineStats s = service->engine->stats();
  const nlohmann::json body = {{"status", "ok"},
                               {"prefix_cache",
                                {{"enabled", s.prefix_cache_enabled},
                                 {"checkpoints", s.prefix_cache_checkpoints},
                                 {"blocks", s.prefix_cache_blocks},
                                 {"device_bytes", s.prefix_cache_device_bytes},
                                 {"host_bytes", s.prefix_cache_host_bytes}}},
                               {"kv_blocks_used", s.num_kv_blocks_used}};
  return json_response(http::status::ok, json_text(body), req, state);
}

// Method check for a known path; returns false (and fills `out`) when it is not allowed.
// HEAD goes wherever GET does (load balancers probe with it); route_request drops the body.
bool allow(const HttpRequest& req, http::verb verb, ServerState& state, Routed& out) {
  if (req.method() == verb || (verb == http::verb::get && req.method() == http::verb::head)) return true;
  HttpResponse res = error_response(
      method_not_allowed(std::string(req.method_string()), std::string(req.target())), &req, state);
  res.set(http::field::allow, verb == http::verb::get ? "GET, HEAD" : "POST");
  out.response = std::move(res);
  return false;
}

Routed dispatch(const HttpRequest& req, ServerState& state, std::string_view path) {
  Routed out;
  if (path == "/health") {
    if (allow(req, http::verb::get, state, out)) {
      out.response = json_response(http::status::ok, R"({"status":"ok"})", req, state);
    }
  } else if (path == "/ready") {
    if (allow(req, http::verb::get, state, out)) out.response = handle_ready(req, state);
  } else if (path == "/metrics") {
    if (allow(req, http::verb::get, state, out)) out.response = handle_metrics(req, state);
  } else if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (allow(req, http::verb::get, state, out)) {
      out.response = handle_models(req, state, path.size() > 11 ? path.substr(11) : "");
    }
  } else if (path == "/v1/chat/completions") {
    if (allow(req, http::verb::post, state, out)) {
      const ModelService* service = ready_service(state);
      out.generation = prepare_chat(parse_chat_request(req.body(), state.schema_limits()), state, *service);
    }
  } else if (path == "/v1/completions") {
    if (allow(req, http::verb::post, state, out)) {
      const ModelService* service = ready_service(state);
      out.generation = prepare_completion(parse_completion_request(req.body(), state.schema_limits()),
                                          state, *service);
    }
  } else if (path == "/v1/messages") {
    if (allow(req, http::verb::post, state, out)) {
      out.generation = prepare_messages(req.body(), state, *ready_service(state));
    }
  } else if (path == "/v1/messages/count_tokens") {
    if (allow(req, http::verb::post, state, out)) {
      out.response = json_response(http::status::ok,
                                   count_tokens_body(req.body(), state, *ready_service(state)), req, state);
    }
  } else if (path == "/v1/responses") {
    if (allow(req, http::verb::post, state, out)) {
      out.generation = prepare_responses(req.body(), state, *ready_service(state));
    }
  } else if (path.starts_with("/v1/responses/")) {
    out.response = handle_stored_response(req, state, path);
  } else if (path == "/v1/cache/reset") {
    if (allow(req, http::verb::post, state, out)) out.response = handle_cache_reset(req, state);
  } else if (path == "/tokenize" || path == "/v1/tokenize") {
    if (allow(req, http::verb::post, state, out)) out.response = handle_tokenize(req, state);
  } else if (path == "/detokenize" || path == "/v1/detokenize") {
    if (allow(req, http::verb::post, state, out)) out.response = handle_detokenize(req, state);
  } else if (auto page = static_file_response(req, state, path)) {  // GET /, /static/*: chat page
    out.response = std::move(page);
  } else {
    out.response = error_response(not_found("unknown_url", "No route for " +
                                                               std::string(req.method_string()) + " " +
                                                               std::string(path) + "."), &req, state);
  }
  return out;
}

}  // namespace

bool keep_alive_after(const HttpRequest& request, const ServerState& state) {
  return request.keep_alive() && state.phase() != ServerPhase::Draining;
}

HttpResponse json_response(http::status status, const std::string& body, const HttpRequest& request,
                           const ServerState& state) {
  HttpResponse res{status, request.version()};
  res.set(http::field::server, kServerName);
  res.set(http::field::content_type, "application/json");
  add_cors_headers(res, state);
  res.keep_alive(keep_alive_after(request, state));
  res.body() = body;
  res.prepare_payload();
  return res;
}

HttpResponse error_response(const ApiError& error, const HttpRequest* request, ServerState& state) {
  state.metrics().on_error(error.metric_label());
  HttpResponse res{static_cast<http::status>(error.status), request ? request->version() : 11};
  res.set(http::field::server, kServerName);
  res.set(http::field::content_type, "application/json");
  add_cors_headers(res, state);
  if (error.retry_after_s > 0) res.set(http::field::retry_after, std::to_string(error.retry_after_s));
  if (error.status == 401) res.set(http::field::www_authenticate, "Bearer");
  res.keep_alive(request && keep_alive_after(*request, state));
  const bool anthropic = request && is_anthropic_path(request_path(std::string_view(request->target().data(),
                                                                                     request->target().size())));
  res.body() = anthropic ? json_text(anthropic_error_json(error)) : error.body_text();
  res.prepare_payload();
  return res;
}

ApiError submit_error(const scheduler::SubmitResult& result, const ServerState& state) {
  const int retry = state.config().retry_after_s;
  switch (result.status) {
    case scheduler::SubmitStatus::QueueFull:
      return queue_full("The server is at capacity: " + result.message + ". Retry later.", retry);
    case scheduler::SubmitStatus::TooLong:
      return context_length_exceeded("messages", "The prompt does not fit the context: " + result.message + ".");
    case scheduler::SubmitStatus::NotReady:
      return not_ready("server_draining", "The engine is not accepting requests: " + result.message + ".", retry);
    case scheduler::SubmitStatus::Accepted: break;
  }
  return internal_error("unexpected submit status");
}

void add_cors_headers(http::fields& headers, const ServerState& state) {
  if (state.config().cors_allow_origin.empty()) return;
  headers.set(http::field::access_control_allow_origin, state.config().cors_allow_origin);
  headers.set(http::field::access_control_expose_headers, kExposedHeaders);
}

std::string_view request_path(std::string_view target) {
  // Absolute form (RFC 9112 3.2.2), as proxies send it: "http://host:port/path?query".
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && boost::beast::iequals(target.substr(0, scheme.size()), scheme)) {
      const size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  return target.substr(0, target.find('?'));
}

std::string_view route_label(std::string_view path) {
  for (std::string_view route : {"/health", "/ready", "/metrics", "/v1/models", "/v1/chat/completions",
                                 "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                                 "/v1/responses", "/v1/cache/reset", "/tokenize", "/detokenize"}) {
    if (path == route) return route;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.starts_with("/v1/responses/")) {
    return path.ends_with("/input_items") ? "/v1/responses/{id}/input_items" : "/v1/responses/{id}";
  }
  if (path == "/v1/tokenize") return "/tokenize";
  if (path == "/v1/detokenize") return "/detokenize";
  if (path == "/" || path == "/index.html" || path.rfind("/static/", 0) == 0) return "/static";
  return "other";  // bounded: unknown paths never become labels of their own
}

Routed route_request(const HttpRequest& request, ServerState& state) {
  const std::string_view path = request_path(std::string_view(request.target().data(), request.target().size()));
  if (request.method() == http::verb::options && !state.config().cors_allow_origin.empty()) {
    Routed out;
    out.response = preflight_response(request, state);
    return out;
  }
  Routed out;
  try {
    if (needs_auth(path) && !authorized(request, state)) {
      const bool no_key = request.find(http::field::authorization) == request.end() &&
                          request.find("x-api-key") == request.end();
      throw ApiException{unauthorized(no_key ? "Missing API key: send 'Authorization: Bearer <key>' "
                                               "(or 'x-api-key: <key>')."
                                             : "Incorrect API key provided.")};
    }
    out = dispatch(request, state, path);
  } catch (const ApiException& e) {
    out.response = error_response(e.error, &request, state);
  }
  if (request.method() == http::verb::head && out.response) {
    // The headers GET would send, Content-Length included, and no body.
    out.response->prepare_payload();
    const auto length = out.response->body().size();
    out.response->body().clear();
    out.response->content_length(length);
  }
  return out;
}

}  // namespace deltaserve::server
