// OpenAI Responses API requests (POST /v1/responses, stateless use plus previous_response_id)
// translated into the internal chat request, so they run through the one generation pipeline:
//   instructions                        -> a leading system message (not carried to the next turn)
//   input: string | items               -> chat messages:
//     message {role, content: string | input_text/output_text parts}
//     function_call {call_id, name, arguments}  -> the assistant message's tool_calls
//     function_call_output {call_id, output}    -> a role "tool" message
//     reasoning {content/summary}               -> the next assistant message's reasoning_content
//   previous_response_id                -> that response's stored conversation goes first
//   tools [{type: function, name, ...}] -> [{type: function, function: {...}}]
//   tool_choice, max_output_tokens, temperature, top_p, stream -> the chat equivalents
//   reasoning.effort "none" / other     -> enable_thinking false / true (absent: the template's)
//   text.format json_object / json_schema -> ChatRequest::response_format in chat's form
// Hosted tools, images, files, background mode, conversations and prompt templates are a
// 400 saying so. Pure apart from the store lookup; throws ApiException; any thread.
#pragma once

#include <string>
#include <string_view>

#include "server/openai_schema.h"
#include "server/responses_store.h"

namespace deltaserve::server {

struct ResponsesRequest {
  ChatRequest chat;
  // The conversation as it is stored for a later previous_response_id: chat.messages
  // without the instructions' system message.
  RequestJson history = RequestJson::array();
  std::string previous_response_id;  // empty: none
  // previous_response_id's items as GET .../input_items lists them (its chain, then its output).
  nlohmann::json previous_items = nlohmann::json::array();
  RequestJson input;  // the request's `input` as sent (validated), for GET .../input_items
  bool store = true;
  // The request fields a response object repeats (instructions, tools, tool_choice,
  // temperature, top_p, max_output_tokens, reasoning, text, metadata, ...).
  nlohmann::json echo = nlohmann::json::object();
};

// `store` resolves previous_response_id (an unknown or expired id is a 400).
ResponsesRequest parse_responses_request(std::string_view body, const SchemaLimits& limits,
                                         ResponseStore& store);

// The chat messages of a Responses `input` (string or items), appended to `messages`.
// `late_system` (if given) gets the path of the first system / developer item that follows a
// message of another role ("input[2]"), empty if none.
void responses_input_to_messages(const RequestJson& input, RequestJson& messages,
                                 std::string* late_system = nullptr);

}  // namespace deltaserve::server
