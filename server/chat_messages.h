// Chat `messages`, `tools` and `tool_choice` validated and normalised into what a Jinja chat
// template (Qwen3.5's in particular) expects. Throws ApiException (400) naming the element
// at fault. Pure functions; any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/request_json.h"

namespace deltaserve::server {

// Each message becomes {role, content: string, [name], [tool_calls], [tool_call_id],
// [reasoning_content]}:
// - role "developer" is mapped to "system" (templates know only system);
// - content given as an array of text parts is joined; non-text parts are rejected;
// - tool_calls[i].function.arguments given as a JSON string is parsed into an object
//   (Qwen3.5's template iterates the arguments as a mapping);
// - `reasoning` (vLLM's name) is accepted as an alias of `reasoning_content`;
// - leading system messages without a `name` are joined into one (blank line between), since
//   templates take one system message, first (Qwen3.5's fails on a second).
// `late_system` (if given) gets the path of the first system message that is left after
// another message ("messages[3]"), empty if none: the 400 names it when the template refuses.
RequestJson normalize_messages(const RequestJson& messages, const std::string& path,
                               std::string* late_system = nullptr);

// null or an array of {"type": "function", "function": {name, description?, parameters?}}.
RequestJson normalize_tools(const RequestJson* tools, const std::string& path);

// null, "none" | "auto" | "required", or {"type": "function", "function": {"name"}} naming
// one of `tools`.
RequestJson normalize_tool_choice(const RequestJson* tool_choice, const RequestJson& tools,
                                     const std::string& path);
// A 400 at `param` (the client's own field) unless `tools` (chat form, or null) has a
// function named `name`.
void require_named_tool(const RequestJson& tools, const std::string& name, const std::string& param);

// Checks the shape of response_format ({type: text | json_object | json_schema, json_schema:
// {name, schema, strict, description}}) and returns it (null for absent). Throws ApiException.
RequestJson normalize_response_format(const RequestJson* response_format, const std::string& path);

}  // namespace deltaserve::server
