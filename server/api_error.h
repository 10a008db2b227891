// OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}} with the HTTP
// status that goes with them. Every 4xx/5xx the daemon answers is built here. `type` and
// `code` are OpenAI's (401 invalid_request_error/invalid_api_key, 404 invalid_request_error/
// model_not_found, 503 service_unavailable_error), since clients match on them; the `type`
// label of deltaserve_errors_total is our own bounded class of the status (metric_label),
// which dashboards and alert rules use and which therefore stays put when a body changes.
// Plain values; any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace deltaserve::server {

struct ApiError {
  int status = 400;
  std::string type;     // OpenAI's: invalid_request_error, rate_limit_error, server_error, ...
  std::string code;     // machine-readable detail: invalid_json, context_length_exceeded, ...
  std::string param;    // the request field at fault; empty -> null
  std::string message;  // one human sentence naming the field and what is wrong
  int retry_after_s = 0;  // > 0 adds a Retry-After header (429, 503)

  nlohmann::json body() const;  // the full {"error": {...}} object
  // The deltaserve_errors_total{type} label: invalid_request_error (other 4xx),
  // authentication_error (401), not_found_error (404), rate_limit_error (429),
  // service_unavailable_error (503), server_error (other 5xx). Streams that break after
  // their headers add stream_error (http_session.cpp).
  const char* metric_label() const;
  // Never throws: invalid UTF-8 (a parser message quoting the client's bytes) is replaced.
  std::string body_text() const;
};

// 400s: the request is wrong. `param` names the field ("messages[2].role").
ApiError invalid_json(const std::string& detail);
ApiError invalid_value(const std::string& param, const std::string& message);
ApiError invalid_type(const std::string& param, const std::string& message);
ApiError unknown_parameter(const std::string& param);
ApiError missing_parameter(const std::string& param);
ApiError unsupported_value(const std::string& param, const std::string& message);
ApiError context_length_exceeded(const std::string& param, const std::string& message);

ApiError unauthorized(const std::string& message);                     // 401
ApiError not_found(const std::string& code, const std::string& message);  // 404
ApiError method_not_allowed(const std::string& method, const std::string& path);  // 405
ApiError payload_too_large(size_t limit_bytes);                          // 413
ApiError queue_full(const std::string& message, int retry_after_s);      // 429
ApiError not_ready(const std::string& code, const std::string& message, int retry_after_s);  // 503
ApiError internal_error(const std::string& message);                     // 500

// The exception the schema parser throws: it carries the finished ApiError up to the
// handler, which turns it into a response. Never crosses a thread hop.
struct ApiException {
  ApiError error;
};

}  // namespace deltaserve::server
