// The grammars the server's constraints compile to (grammar.h). Each throws SchemaError
// (json_schema_grammar.h) with a message for a 400 when the input is malformed or beyond the
// supported subset; the result is finished and immutable.
//
// Every grammar lets the output open with up to two whitespace bytes (a model writes
// "\n\n" after "</think>"), then holds exactly one sentence, after which only the end ids
// are allowed.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/json_schema_grammar.h"

namespace deltaserve::runtime::grammar {

// response_format json_object: one JSON object, any members.
std::shared_ptr<const Grammar> json_object_grammar();
// response_format json_schema: one JSON value valid against `schema`. `strict`: the client's
// strict: true (JsonSchemaCompiler: an unknown format is then an error, not an annotation).
std::shared_ptr<const Grammar> json_schema_grammar(const SchemaJson& schema, bool strict = false);

// Forced Qwen XML tool calls (the Qwen3.5 chat template's format, as server/tool_call_parser
// reads it):
//   <tool_call>\n<function=NAME>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
// `tools`: the request's validated OpenAI tools array ({type: function, function: {name,
// parameters, strict}}; a function's strict: true compiles its schema strictly, see
// JsonSchemaCompiler). only_tool: the named function (tool_choice {function}); without it
// (tool_choice "required") any of the tools. `parallel` (OpenAI's parallel_tool_calls, not
// Anthropic's disable_parallel_tool_use): one or more calls, separated by "\n", each of any
// allowed tool (named: the same function); otherwise exactly one call.
// Parameters come in schema order, required ones always, optional ones may be left out. A
// parameter whose schema type is (or lists) "string" takes raw text without '<' (or one of
// its enum strings, raw); any other takes compact JSON valid against its schema.
std::shared_ptr<const Grammar> tool_call_grammar(const SchemaJson& tools, const std::optional<std::string>& only_tool,
                                                 bool parallel);

}  // namespace deltaserve::runtime::grammar
