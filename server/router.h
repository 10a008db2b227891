// Request dispatch, apart from the session's I/O (as in Beast's http_server_async): maps
// method + path to a handler and returns either a finished response or a GenerationJob for
// the session to run. Auth, 404/405, readiness and every error body are decided here.
//
//   GET  /health                  liveness: 200 while the process serves HTTP
//   (HEAD works wherever GET does; absolute-form targets "http://host/path" are accepted)
//   GET  /ready                   200 when the model is loaded; 503 loading / draining
//   GET  /metrics                 Prometheus text format
//   GET  /v1/models[/{id}]        the served model
//   POST /v1/chat/completions     -> GenerationJob
//   POST /v1/completions          -> GenerationJob
//   POST /v1/messages             -> GenerationJob (Anthropic Messages API; agent_routes.h)
//   POST /v1/messages/count_tokens
//   POST /v1/responses            -> GenerationJob (OpenAI Responses API; agent_routes.h)
//   GET, DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items  the stored responses
//   POST /tokenize, /detokenize   (also under /v1/)
//   GET  /, /static/*             the built-in chat page (static_files.h)
//
// With --api-key, /v1/*, /tokenize and /detokenize need "Authorization: Bearer <key>" (the
// scheme in any case) or Anthropic's "x-api-key: <key>";
// /health, /ready and /metrics stay open (probes and scrapers carry no key).
// Thread-safe; called on the session's strand.
#pragma once

#include <optional>
#include <string_view>

#include <boost/beast/http.hpp>

#include "server/api_error.h"
#include "server/generation_job.h"
#include "server/server_state.h"

namespace deltaserve::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

struct Routed {
  std::optional<HttpResponse> response;    // answer with this, or
  std::optional<GenerationJob> generation; // run this
};

Routed route_request(const HttpRequest& request, ServerState& state);

// The CORS headers of every response (with --cors-allow-origin): the allowed origin and the
// response headers a browser client may read.
void add_cors_headers(http::fields& headers, const ServerState& state);

// The path of a request target: the query dropped, an absolute-form target
// ("http://host:port/path") reduced to its path.
std::string_view request_path(std::string_view target);

// The `route` label of deltaserve_http_responses_total for a path: one of a fixed set
// ("/v1/chat/completions", "/v1/models/{id}", "/static", ...; "other" for anything else).
std::string_view route_label(std::string_view path);

// A JSON response with the daemon's common headers (Server, CORS, Connection).
HttpResponse json_response(http::status status, const std::string& body, const HttpRequest& request,
                           const ServerState& state);
// An OpenAI error body; counts it in deltaserve_errors_total. `request` may be null when
// the request could not be parsed (then HTTP/1.1 and Connection: close).
HttpResponse error_response(const ApiError& error, const HttpRequest* request, ServerState& state);

// The ApiError for an engine's refusal of submit().
ApiError submit_error(const scheduler::SubmitResult& result, const ServerState& state);

// Whether the connection stays open after answering `request`.
bool keep_alive_after(const HttpRequest& request, const ServerState& state);

}  // namespace deltaserve::server
