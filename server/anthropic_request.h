// Anthropic Messages API requests (POST /v1/messages, /v1/messages/count_tokens) translated
// into the internal chat request, so they run through the one generation pipeline:
//   system (string or text blocks)   -> a leading system message
//   user text / tool_result blocks   -> user messages / role "tool" messages (tool_use_id)
//   assistant text / thinking /      -> assistant content / reasoning_content /
//     tool_use blocks                     tool_calls (input -> arguments)
//   a final assistant message         -> continue_final_message (a prefill: the answer
//                                           continues its text)
//   tools [{name, description, input_schema}] -> [{type: function, function: {.., parameters}}]
//   tool_choice auto | any | tool {name} | none -> "auto" | "required" | {function} | "none"
//   thinking {type: enabled | adaptive | disabled}
//                                        -> chat_template_kwargs.enable_thinking (absent:
//                                           off, as Anthropic's default); enabled's
//                                           budget_tokens (required, >= 1024, < max_tokens)
//                                           -> thinking_token_budget (the reasoning is
//                                           forced closed once it is spent)
//   stop_sequences, max_tokens, temperature, top_p, top_k, stream -> the same parameters
//   output_config.format {type: json_schema, schema} -> response_format json_schema
//   cache_control (top level, blocks, tools), metadata, output_config.effort, tools' strict
//                                        -> accepted, change nothing
// Unknown fields and block types are a 400 naming the field; so are images, documents and
// server tools (the served models are text-only and run no tools themselves).
// Pure functions; throw ApiException; any thread.
#pragma once

#include <string_view>

#include "server/openai_schema.h"

namespace deltaserve::server {

// POST /v1/messages (max_tokens is required, as in Anthropic's API).
ChatRequest parse_anthropic_request(std::string_view body, const SchemaLimits& limits);
// POST /v1/messages/count_tokens: the same body without max_tokens / sampling.
ChatRequest parse_anthropic_count_tokens(std::string_view body, const SchemaLimits& limits);

// The OpenAI chat form of the Anthropic body's conversation fields (messages, system,
// tools, tool_choice, thinking), for tests and for the two parsers above.
RequestJson anthropic_to_chat_json(const RequestJson& root, bool count_tokens, const SchemaLimits& limits);

}  // namespace deltaserve::server
