// A validated generation request turned into everything the session needs to run it: the
// engine's RequestSpec (prompt ids, sampling, limits, stop ids), the text-side setup
// (stop strings, think split, token limit) and the response shape. The chat template is
// applied and the prompt tokenized here, on the I/O thread (STYLE: "Session strand").
// Throws ApiException: 400 for a template failure or a prompt that does not fit the context,
// 404 for a foreign model name. Pure apart from the codec calls; any thread.
#pragma once

#include <string>

#include "scheduler/request.h"
#include "server/generation_state.h"
#include "server/openai_response.h"
#include "server/openai_schema.h"
#include "server/server_state.h"
#include "server/wire_format.h"

namespace deltaserve::server {

struct GenerationJob {
  scheduler::RequestSpec spec;
  GenerationSetup setup;
  ResponseFormatter::Setup format;
  bool stream = false;
  bool include_usage = false;     // a usage chunk before [DONE]
  bool continuous_usage = false;  // usage in every chunk too (vLLM's continuous_usage_stats)
  // The wire format of the agent APIs (/v1/messages, /v1/responses); null = OpenAI's
  // chat/completions framing, built from `format`.
  std::shared_ptr<WireFormat> wire;
};

GenerationJob prepare_chat(const ChatRequest& request, const ServerState& state,
                           const ModelService& service);
GenerationJob prepare_completion(const CompletionRequest& request, const ServerState& state,
                                 const ModelService& service);

// The prompt text of a chat request (template applied, defaults merged). Throws ApiException.
std::string render_chat_prompt(const ChatRequest& request, const ServerState& state,
                               const ModelService& service);

// "chatcmpl-" / "cmpl-" followed by 24 random alphanumerics.
std::string make_request_id(const char* prefix);

}  // namespace deltaserve::server
