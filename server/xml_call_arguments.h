// The arguments of one Qwen3.5 XML tool call, turned into JSON text while the call's body
// streams in. Fed the bytes that follow "<function=NAME>":
//   (<parameter=P>\nVALUE\n</parameter>\n)* </function>\n</tool_call>
// it returns fragments of the arguments object (without its opening "{", which the caller
// writes with the call's first piece). The concatenation of "{" and every fragment up to the
// end of the call is one JSON object, and no fragment depends on how the text was cut.
//
// Values:
// - a parameter the tool's schema types as non-string (ToolParamTypes) is held until its
//   "</parameter>", then written as its compact JSON if it parses (within 64 levels), or as
//   a string otherwise;
// - any other value is a JSON string, written as it arrives. Held back: a suffix that could
//   begin "</parameter>" or "</tool_call>", the newline before it (the template's layout:
//   one "\n" after the parameter tag and one before the closing tag are not part of the
//   value) and an unfinished UTF-8 character, so every fragment is valid UTF-8 on its own.
//   Invalid bytes become U+FFFD.
// - A parameter named twice keeps its first value (the second is dropped, so the object has
//   no duplicate keys).
// The call is committed once its name was read, so what breaks the format afterwards (text
// that is no parameter, a missing "</function>") is dropped and the object closed at
// "</tool_call>"; finish() closes it when the output ends first (max_tokens).
// One per call, used from its session's strand only.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "server/request_json.h"

namespace deltaserve::server {

class XmlCallArguments {
 public:
  // json_params: parameter name -> true when its value is JSON-decoded (the tool's entry in
  // ToolParamTypes); null for a tool the request does not declare (every value a string).
  explicit XmlCallArguments(const std::map<std::string, bool>* json_params) : json_params_(json_params) {}

  struct Step {
    std::string arguments;  // the next fragment (may be empty)
    bool ended = false;     // "</tool_call>" was read: arguments ends with the closing "}"
    std::string after;      // ended: the bytes pushed after "</tool_call>"
  };
  Step push(std::string_view text);
  // The output ended inside the call: the rest of the object, closed.
  std::string finish();

 private:
  enum class Mode { Params, StringValue, JsonValue, SkipValue, AfterFunction, Discard };

  // One step of the state machine on buf_; false when it needs more bytes.
  bool step(Step& out);
  bool step_params(Step& out);
  bool step_string_value(Step& out);
  bool step_buffered_value(Step& out);
  bool step_after_function(Step& out);
  bool step_discard(Step& out);
  void end_call(Step& out, size_t consumed);
  bool drop_layout_space();
  std::string buffered_value_json(std::string_view value) const;

  const std::map<std::string, bool>* json_params_;
  std::string buf_;  // bytes not consumed yet
  Mode mode_ = Mode::Params;
  bool value_started_ = false;  // StringValue: the layout newline after the tag is handled
  size_t scan_from_ = 0;        // buffered modes: where a closing tag may start in buf_
  int num_params_ = 0;          // written so far (a comma before each after the first)
  std::set<std::string> seen_;  // parameter names written
};

// text as the body of a JSON string (no quotes), invalid UTF-8 replaced by U+FFFD.
std::string json_string_body(std::string_view text);
// The JSON value of model output, or nothing (syntax error, invalid UTF-8, deeper than 64
// levels: model output is untrusted, and dump and the template recurse).
std::optional<RequestJson> try_decode_json(std::string_view text);
// Compact JSON text (invalid UTF-8 replaced).
std::string compact_json(const RequestJson& value);

}  // namespace deltaserve::server
