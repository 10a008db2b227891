// Separates tool calls from the answer text of a chat generation, as Qwen3 / Qwen3.5 emit
// them (the content channel, after the <think> split). Two body forms inside
// "<tool_call>" ... "</tool_call>":
//   Qwen3.5 (XML):  <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>
//   Qwen3   (JSON): {"name": NAME, "arguments": {...}}
// An XML parameter value is JSON-decoded when the tool's schema gives the parameter a
// non-string type and the value parses as JSON; otherwise it stays a string.
//
// Text is pushed in arbitrary pieces. Held back: a suffix that could still begin
// "<tool_call>", and trailing whitespace (dropped when a call follows, released otherwise);
// ordinary text is never swallowed. A call that fails to parse, or is still open at
// finish(), comes back as content, byte for byte. Whitespace-only text between or after
// calls is layout and is dropped.
// One per request, used from its session's strand only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/request_json.h"

namespace deltaserve::server {

// One parsed call, in OpenAI's shape.
struct ToolCall {
  int32_t index = 0;      // 0, 1, ... in order of appearance
  std::string id;         // "call_" + 24 random alphanumerics
  std::string name;
  std::string arguments;  // a JSON object, as text
};

// For each tool name, its parameters whose schema type is not a string (their XML values
// are JSON-decoded). Built once per request from the validated `tools`.
using ToolParamTypes = std::map<std::string, std::map<std::string, bool>>;
ToolParamTypes tool_param_types(const RequestJson& tools);

class ToolCallParser {
 public:
  struct Pieces {
    std::string content;
    std::vector<ToolCall> calls;
  };

  explicit ToolCallParser(ToolParamTypes param_types) : types_(std::move(param_types)) {}

  Pieces push(std::string_view text);
  Pieces finish();  // end of output: release what is held (an open call as content)
  int32_t num_calls() const { return num_calls_; }

 private:
  void emit_text(Pieces& out, std::string_view text);
  void end_call(Pieces& out, std::string_view body);
  bool parse_body(std::string_view body, ToolCall& call) const;
  bool parse_xml(std::string_view body, ToolCall& call) const;
  bool parse_json(std::string_view body, ToolCall& call) const;

  ToolParamTypes types_;
  bool in_call_ = false;
  bool skip_space_ = false;        // right after a call: leading whitespace is layout
  std::string held_;               // text: a partial "<tool_call>" and whitespace; call: the body
  std::string space_before_call_;  // dropped with a parsed call, given back with a failed one
  size_t scan_from_ = 0;           // call mode: where in held_ "</tool_call>" may start
  int32_t num_calls_ = 0;
};

}  // namespace deltaserve::server
