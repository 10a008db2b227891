#include "server/router.h"

#include "server/openai_response.h"
#include "server/static_files.h"

namespace deltaserve::server {
namespace {

constexpr std::string_view kServerName = "deltaserve";

// Constant-time comparison, so the time to reject a key says nothing about its prefix.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool authorized(const HttpRequest& request, const ServerState& state) {
  const auto& keys = state.config().api_keys;
  if (keys.empty()) return true;
  const auto header = request.find(http::field::authorization);
  if (header == request.end()) return false;
  std::string_view value(header->value().data(), header->value().size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.size() <= kBearer.size() || value.substr(0, kBearer.size()) != kBearer) return false;
  value.remove_prefix(kBearer.size());
  bool ok = false;
  for (const std::string& key : keys) ok = same_secret(value, key) || ok;
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
  if (service) stats = service->engine->stats();
  HttpResponse res{http::status::ok, req.version()};
  res.set(http::field::server, kServerName);
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.keep_alive(keep_alive_after(req, state));
  res.body() = state.metrics().render(service ? &stats : nullptr, state.phase() == ServerPhase::Ready);
  res.prepare_payload();
  return res;
}

HttpResponse handle_models(const HttpRequest& req, ServerState& state, std::string_view id) {
  if (id.empty()) {
    const nlohmann::json body = {{"object", "list"}, {"data", nlohmann::json::array({model_card(state)})}};
    return json_response(http::status::ok, json_text(body), req, state);
  }
  if (id != state.model_name()) {
    return error_response(not_found("model_not_found", "The model '" + std::string(id) +
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
bool allow(const HttpRequest& req, http::verb verb, ServerState& state, Routed& out) {
  if (req.method() == verb) return true;
  HttpResponse res = error_response(
      method_not_allowed(std::string(req.method_string()), std::string(req.target())), &req, state);
  res.set(http::field::allow, verb == http::verb::get ? "GET" : "POST");
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
  if (!state.config().cors_allow_origin.empty()) {
    res.set(http::field::access_control_allow_origin, state.config().cors_allow_origin);
  }
  res.keep_alive(keep_alive_after(request, state));
  res.body() = body;
  res.prepare_payload();
  return res;
}

HttpResponse error_response(const ApiError& error, const HttpRequest* request, ServerState& state) {
  state.metrics().on_error(error.type);
  HttpResponse res{static_cast<http::status>(error.status), request ? request->version() : 11};
  res.set(http::field::server, kServerName);
  res.set(http::field::content_type, "application/json");
  if (!state.config().cors_allow_origin.empty()) {
    res.set(http::field::access_control_allow_origin, state.config().cors_allow_origin);
  }
  if (error.retry_after_s > 0) res.set(http::field::retry_after, std::to_string(error.retry_after_s));
  if (error.status == 401) res.set(http::field::www_authenticate, "Bearer");
  res.keep_alive(request && keep_alive_after(*request, state));
  res.body() = error.body_text();
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

Routed route_request(const HttpRequest& request, ServerState& state) {
  std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (request.method() == http::verb::options && !state.config().cors_allow_origin.empty()) {
    Routed out;
    HttpResponse res = json_response(http::status::no_content, "", request, state);
    res.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
    res.set(http::field::access_control_allow_headers, "Authorization, Content-Type");
    res.set(http::field::access_control_max_age, "600");
    out.response = std::move(res);
    return out;
  }
  try {
    if (needs_auth(path) && !authorized(request, state)) {
      throw ApiException{unauthorized(request.find(http::field::authorization) == request.end()
                                          ? "Missing API key: send 'Authorization: Bearer <key>'."
                                          : "Incorrect API key provided.")};
    }
    return dispatch(request, state, path);
  } catch (const ApiException& e) {
    Routed out;
    out.response = error_response(e.error, &request, state);
    return out;
  }
}

}  // namespace deltaserve::server
