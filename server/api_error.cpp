#include "server/api_error.h"

namespace deltaserve::server {
namespace {

ApiError make(int status, std::string type, std::string code, std::string param,
              std::string message) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

ApiError bad_request(std::string code, const std::string& param, std::string message) {
  return make(400, "invalid_request_error", std::move(code), param, std::move(message));
}

}  // namespace

nlohmann::json ApiError::body() const {
  nlohmann::json error = {{"message", message}, {"type", type}};
  error["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  error["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", std::move(error)}};
}

const char* ApiError::metric_label() const {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: break;
  }
  return status >= 500 ? "server_error" : "invalid_request_error";
}

std::string ApiError::body_text() const {
  return body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError invalid_json(const std::string& detail) {
  return bad_request("invalid_json", "", "The request body is not valid JSON: " + detail);
}

ApiError invalid_value(const std::string& param, const std::string& message) {
  return bad_request("invalid_value", param, "Invalid value for '" + param + "': " + message);
}

ApiError invalid_type(const std::string& param, const std::string& message) {
  return bad_request("invalid_type", param, "Invalid type for '" + param + "': " + message);
}

ApiError unknown_parameter(const std::string& param) {
  return bad_request("unknown_parameter", param,
                     "Unrecognized request argument supplied: '" + param + "'.");
}

ApiError missing_parameter(const std::string& param) {
  return bad_request("missing_required_parameter", param,
                     "Missing required parameter: '" + param + "'.");
}

ApiError unsupported_value(const std::string& param, const std::string& message) {
  return bad_request("unsupported_value", param,
                     "Unsupported value for '" + param + "': " + message);
}

ApiError context_length_exceeded(const std::string& param, const std::string& message) {
  return bad_request("context_length_exceeded", param, message);
}

// OpenAI answers a wrong or missing key with type invalid_request_error (the status, 401,
// is what SDKs turn into AuthenticationError).
ApiError unauthorized(const std::string& message) {
  return make(401, "invalid_request_error", "invalid_api_key", "", message);
}

// OpenAI's unknown model and unknown URL are invalid_request_error too (404 ->
// NotFoundError in the SDKs); the code says which.
ApiError not_found(const std::string& code, const std::string& message) {
  return make(404, "invalid_request_error", code, "", message);
}

ApiError method_not_allowed(const std::string& method, const std::string& path) {
  return make(405, "invalid_request_error", "method_not_allowed", "",
              "Method " + method + " is not allowed on " + path + ".");
}

ApiError payload_too_large(size_t limit_bytes) {
  return make(413, "invalid_request_error", "request_too_large", "",
              "The request body is larger than the limit of " + std::to_string(limit_bytes) +
                  " bytes.");
}

ApiError queue_full(const std::string& message, int retry_after_s) {
  ApiError e = make(429, "rate_limit_error", "queue_full", "", message);
  e.retry_after_s = retry_after_s;
  return e;
}

// OpenAI's 503 type; the code says why (model_loading, server_draining, server_shutdown)
// where OpenAI says server_is_overloaded: every one is worth a retry after Retry-After.
ApiError not_ready(const std::string& code, const std::string& message, int retry_after_s) {
  ApiError e = make(503, "service_unavailable_error", code, "", message);
  e.retry_after_s = retry_after_s;
  return e;
}

ApiError internal_error(const std::string& message) {
  return make(500, "server_error", "internal_error", "", message);
}

}  // namespace deltaserve::server
