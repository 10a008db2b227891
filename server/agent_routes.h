// The agent APIs' handlers: Anthropic's /v1/messages (+ /count_tokens) and OpenAI's
// /v1/responses. Each translates its body into the internal ChatRequest (anthropic_request.h,
// responses_request.h) and runs it through prepare_chat like /v1/chat/completions; only the
// wire format differs (anthropic_wire.h, responses_wire.h). Errors on /v1/messages* are
// written in Anthropic's error format by router.cpp's error_response.
// Called on the session's strand; throw ApiException.
#pragma once

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

}  // namespace deltaserve::server
