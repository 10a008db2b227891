// The agent APIs' handlers: Anthropic's /v1/messages (+ /count_tokens) and OpenAI's
// /v1/responses. Each translates its body into the internal ChatRequest (anthropic_request.h,
// responses_request.h) and runs it through prepare_chat like /v1/chat/completions; only the
// wire format differs (anthropic_wire.h, responses_wire.h). Errors on /v1/messages* are
// written in Anthropic's error format by router.cpp's error_response.
// Called on the session's strand; throw ApiException.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "server/generation_job.h"
#include "server/server_state.h"

namespace deltaserve::server {

// Paths whose errors use Anthropic's format.
bool is_anthropic_path(std::string_view path);

GenerationJob prepare_messages(std::string_view body, ServerState& state, const ModelService& service);
// {"input_tokens": N}: the prompt the same body would run on, tokenized.
std::string count_tokens_body(std::string_view body, ServerState& state, const ModelService& service);
GenerationJob prepare_responses(std::string_view body, ServerState& state, const ModelService& service);

// The stored responses (ResponseStore), as OpenAI's SDKs call them. `id` and `query` (the
// target's parameters) come percent-decoded. An id not in the store (never stored, store:
// false, expired, evicted, deleted) is a 404 with OpenAI's error body.
using QueryParams = std::map<std::string, std::string>;
// GET /v1/responses/{id}: the response object as the create call returned it.
std::string stored_response_body(const std::string& id, const QueryParams& query, ServerState& state);
// DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}.
std::string deleted_response_body(const std::string& id, ServerState& state);
// GET /v1/responses/{id}/input_items: OpenAI's list object (object "list", data, first_id,
// last_id, has_more) of the items the response ran on: with previous_response_id the chain's
// input and output items first, then the request's input; `limit` 1-100 (20), `order` asc | desc
// (desc, OpenAI's default), `after` an item id (the page starts after it).
std::string input_items_body(const std::string& id, const QueryParams& query, ServerState& state);

}  // namespace deltaserve::server
