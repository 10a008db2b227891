// Separates tool calls from the answer text of a chat generation, as Qwen3 / Qwen3.5 emit
// them (the content channel, after the <think> split). Two body forms inside
// "<tool_call>" ... "</tool_call>":
//   Qwen3.5 (XML):  <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>
//   Qwen3   (JSON): {"name": NAME, "arguments": {...}}
// An XML parameter value is JSON-decoded when the tool's schema gives the parameter a
// non-string type and the value parses as JSON; otherwise it stays a string.
//
// Calls stream in pieces, as OpenAI streams tool_calls: an XML call starts (index, id, name,
// arguments "{") as soon as "<function=NAME>" was read, then its arguments follow in
// fragments as the text arrives (xml_call_arguments.h), and its last piece closes the object.
// The concatenation of a call's fragments is its arguments JSON, whatever the cuts. A JSON
// body is read whole and comes out as one piece (starts and ends).
//
// Text is pushed in arbitrary pieces. Held back: a suffix that could still begin
// "<tool_call>", and trailing whitespace (dropped when a call follows, released otherwise);
// ordinary text is never swallowed. A call whose body is not "<function=NAME>" nor a valid
// JSON call, or that is still undecided at finish(), comes back as content, byte for byte;
// an XML call, once started, stays a call (a malformed rest is dropped, finish() closes it).
// Whitespace-only text between or after calls is layout and is dropped.
// One per request, used from its session's strand only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/request_json.h"
#include "server/xml_call_arguments.h"

namespace deltaserve::server {

// A call in OpenAI's shape, or a piece of one while it streams. A whole call is one piece
// that starts and ends.
struct ToolCall {
  int32_t index = 0;      // 0, 1, ... in order of appearance
  std::string id;         // "call_" + 24 random alphanumerics (set when `starts`)
  std::string name;       // set when `starts`
  std::string arguments;  // a JSON object, as text (a piece: the next fragment of it)
  bool starts = true;     // the call's first piece
  bool ends = true;       // the call's last piece
};

// Appends a piece to a list of calls: a piece that continues the last call is merged into it.
void append_call_piece(std::vector<ToolCall>& calls, const ToolCall& piece);

// For each tool name, its parameters whose schema type is not a string (their XML values
// are JSON-decoded). Built once per request from the validated `tools`.
using ToolParamTypes = std::map<std::string, std::map<std::string, bool>>;
ToolParamTypes tool_param_types(const RequestJson& tools);

class ToolCallParser {
 public:
  // Output in order: content and call pieces (adjacent ones of a kind merged).
  struct Segment {
    bool is_call = false;
    std::string content;  // !is_call
    ToolCall call;        // is_call
  };
  struct Pieces {
    std::vector<Segment> segments;
    std::string content() const;         // all the content
    std::vector<ToolCall> calls() const;  // the call pieces, merged per call
  };

  // `calls_only`: the output was forced to be calls (tool_choice "required" or a named
  // function), so what finish() finds undecided is a call cut before its name (max_tokens, a
  // stop string): dropped, never content.
  explicit ToolCallParser(ToolParamTypes param_types, bool calls_only = false)
      : types_(std::move(param_types)), calls_only_(calls_only) {}

  Pieces push(std::string_view text);
  Pieces finish();  // end of output: release what is held (an open call as content)
  int32_t num_calls() const { return num_calls_; }

 private:
  enum class Mode {
    Text,      // answer text
    Head,      // after "<tool_call>": deciding between XML, JSON and not a call
    Buffered,  // a JSON body or not a call: held whole until "</tool_call>"
    Call,      // an XML call, streaming its arguments
  };

  bool step(Pieces& out);  // one step on held_; false when more text is needed
  bool step_text(Pieces& out);
  bool step_head(Pieces& out);
  bool step_buffered(Pieces& out);
  void emit_text(Pieces& out, std::string_view text);
  void emit_call(Pieces& out, ToolCall piece);
  void start_xml_call(Pieces& out, std::string name);
  void end_buffered(Pieces& out, std::string_view body);
  bool parse_json(std::string_view body, ToolCall& call) const;

  ToolParamTypes types_;
  bool calls_only_ = false;
  Mode mode_ = Mode::Text;
  bool skip_space_ = false;        // right after a call: leading whitespace is layout
  std::string held_;               // text: a partial "<tool_call>" and whitespace; call: the body
  std::string space_before_call_;  // dropped with a parsed call, given back with a failed one
  size_t scan_from_ = 0;           // Buffered: where in held_ "</tool_call>" may start
  std::optional<XmlCallArguments> xml_;  // Call mode
  int32_t num_calls_ = 0;
};

}  // namespace deltaserve::server
