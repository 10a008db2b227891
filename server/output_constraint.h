// The output constraint of a chat request (runtime/grammar), built from its validated fields:
//   tool_choice "required"        -> one Qwen XML tool call of one of the request's tools
//   tool_choice {function: NAME}  -> exactly one call of NAME
//   response_format json_schema   -> one JSON value valid against the schema (strict subset)
//   response_format json_object   -> one JSON object
// (tool_choice wins when both are set: a forced call leaves no content to format.) With the
// prompt ending inside <think>, the output is free until "</think>" and constrained after.
// A thinking budget (sampling.thinking_budget) with the prompt inside <think> needs a
// constraint too, without a grammar when nothing else asks for one: the reasoning is forced
// closed ("\n</think>\n\n") once the budget is spent.
//
// Pure function of the request and the codec's vocabulary; any thread (the I/O strand).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/grammar/constraint.h"
#include "server/openai_schema.h"
#include "server/text_codec.h"

namespace deltaserve::server {

// Throws ApiException (400, OpenAI error body) for a malformed schema or one outside the
// subset, naming the field. end_token_ids: what may end the output once the grammar is
// complete (EOS and the request's stop ids). Null when the request leaves the output free.
std::shared_ptr<const runtime::grammar::Constraint> build_output_constraint(const ChatRequest& request,
                                                                            const TextCodec& codec,
                                                                            bool prompt_ends_in_reasoning,
                                                                            std::vector<int32_t> end_token_ids);

}  // namespace deltaserve::server
