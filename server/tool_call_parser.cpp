#include "server/tool_call_parser.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/generation_job.h"

namespace deltaserve::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";
constexpr std::string_view kSpace = " \t\r\n";
// Model output is untrusted: deeper JSON is not decoded (dump and the template recurse).
constexpr int kMaxJsonDepth = 64;

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const size_t max_len = std::min(text.size(), tag.size() - 1);
  for (size_t len = max_len; len > 0; --len) {
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  }
  return 0;
}

std::string_view trim(std::string_view s) {
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

bool within_depth(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// The JSON value of `text`, or nothing (syntax error, invalid UTF-8, too deep).
std::optional<RequestJson> try_json(std::string_view text) {
  if (!within_depth(text)) return std::nullopt;
  try {
    return parse_request_json(text);
  } catch (const ApiException&) {
    return std::nullopt;
  }
}

std::string arguments_text(const RequestJson& args) {
  return args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

ToolParamTypes tool_param_types(const RequestJson& tools) {
  ToolParamTypes out;
  if (!tools.is_array()) return out;
  for (const RequestJson& tool : tools) {
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    const auto tool_name = fn->find("name");
    if (tool_name == fn->end() || !tool_name->is_string()) continue;
    std::map<std::string, bool>& params = out[tool_name->get<std::string>()];
    const auto schema = fn->find("parameters");
    if (schema == fn->end() || !schema->is_object()) continue;
    const auto props = schema->find("properties");
    if (props == schema->end() || !props->is_object()) continue;
    for (const auto& [name, prop] : props->items()) {
      bool is_string = false;
      if (prop.is_object() && prop.contains("type")) {
        const RequestJson& type = prop["type"];
        is_string = type == "string";
        if (type.is_array()) {
          for (const RequestJson& t : type) is_string = is_string || t == "string";
        }
      }
      params[name] = !is_string;
    }
  }
  return out;
}

void ToolCallParser::emit_text(Pieces& out, std::string_view text) {
  if (skip_space_) {
    const size_t first = text.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return;
    text.remove_prefix(first);
    skip_space_ = false;
  }
  out.content.append(text);
}

ToolCallParser::Pieces ToolCallParser::push(std::string_view text) {
  Pieces out;
  std::string buffer = std::move(held_);
  held_.clear();
  buffer.append(text);
  std::string_view rest = buffer;
  while (!rest.empty()) {
    if (in_call_) {
      const size_t at = rest.find(kClose, std::min(scan_from_, rest.size()));
      if (at == std::string_view::npos) {
        // Only the last bytes can begin the close tag next time.
        scan_from_ = rest.size() >= kClose.size() ? rest.size() - kClose.size() + 1 : 0;
        held_.assign(rest);
        break;
      }
      end_call(out, rest.substr(0, at));
      rest.remove_prefix(at + kClose.size());
      continue;
    }
    const size_t at = rest.find(kOpen);
    if (at != std::string_view::npos) {
      const std::string_view before = rest.substr(0, at);
      const size_t last = before.find_last_not_of(kSpace);
      const size_t text_len = last == std::string_view::npos ? 0 : last + 1;
      emit_text(out, before.substr(0, text_len));
      space_before_call_.assign(before.substr(text_len));
      in_call_ = true;
      scan_from_ = 0;
      rest.remove_prefix(at + kOpen.size());
      continue;
    }
    // Hold a possible start of "<tool_call>" and the whitespace before it.
    size_t keep = partial_tag_suffix(rest, kOpen);
    const std::string_view head = rest.substr(0, rest.size() - keep);
    const size_t last = head.find_last_not_of(kSpace);
    keep = rest.size() - (last == std::string_view::npos ? 0 : last + 1);
    emit_text(out, rest.substr(0, rest.size() - keep));
    held_.assign(rest.substr(rest.size() - keep));
    break;
  }
  return out;
}

ToolCallParser::Pieces ToolCallParser::finish() {
  Pieces out;
  std::string held = std::move(held_);
  held_.clear();
  if (in_call_) {
    in_call_ = false;  // never closed: the model's bytes go out as they came
    emit_text(out, space_before_call_ + std::string(kOpen) + held);
  } else {
    emit_text(out, held);
  }
  return out;
}

void ToolCallParser::end_call(Pieces& out, std::string_view body) {
  in_call_ = false;
  ToolCall call;
  if (parse_body(body, call)) {
    call.index = num_calls_++;
    call.id = make_request_id("call_");
    out.calls.push_back(std::move(call));
    skip_space_ = true;  // layout between and after calls
  } else {
    emit_text(out, space_before_call_ + std::string(kOpen) + std::string(body) +
                       std::string(kClose));
  }
  space_before_call_.clear();
}

bool ToolCallParser::parse_body(std::string_view body, ToolCall& call) const {
  body = trim(body);
  if (body.starts_with(kFunction)) return parse_xml(body, call);
  if (body.starts_with("{")) return parse_json(body, call);
  return false;
}

// <function=NAME> (<parameter=P>\nVALUE\n</parameter>)* </function>
bool ToolCallParser::parse_xml(std::string_view s, ToolCall& call) const {
  s.remove_prefix(kFunction.size());
  const size_t name_end = s.find('>');
  if (name_end == std::string_view::npos || name_end == 0) return false;
  call.name = std::string(trim(s.substr(0, name_end)));
  if (call.name.empty() || call.name.find_first_of("<\n") != std::string::npos) return false;
  s.remove_prefix(name_end + 1);
  const auto tool = types_.find(call.name);
  RequestJson args = RequestJson::object();
  while (true) {
    s = s.substr(std::min(s.size(), s.find_first_not_of(kSpace)));
    if (s.starts_with(kFunctionEnd)) {
      if (!trim(s.substr(kFunctionEnd.size())).empty()) return false;
      call.arguments = arguments_text(args);
      return true;
    }
    if (!s.starts_with(kParameter)) return false;
    s.remove_prefix(kParameter.size());
    const size_t pname_end = s.find('>');
    if (pname_end == std::string_view::npos) return false;
    const std::string pname(trim(s.substr(0, pname_end)));
    if (pname.empty() || pname.find_first_of("<\n") != std::string::npos) return false;
    s.remove_prefix(pname_end + 1);
    const size_t value_end = s.find(kParameterEnd);
    if (value_end == std::string_view::npos) return false;
    std::string_view value = s.substr(0, value_end);
    s.remove_prefix(value_end + kParameterEnd.size());
    // The template writes "\n" + value + "\n": those two are layout.
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    bool json_typed = false;
    if (tool != types_.end()) {
      const auto p = tool->second.find(pname);
      json_typed = p != tool->second.end() && p->second;
    }
    std::optional<RequestJson> decoded;
    if (json_typed) decoded = try_json(value);
    args[pname] = decoded ? std::move(*decoded) : RequestJson(std::string(value));
  }
}

// {"name": NAME, "arguments": {...}}  ("parameters" is accepted for "arguments"; arguments
// given as a JSON string holding an object are decoded).
bool ToolCallParser::parse_json(std::string_view body, ToolCall& call) const {
  const std::optional<RequestJson> value = try_json(body);
  if (!value || !value->is_object()) return false;
  const auto name = value->find("name");
  if (name == value->end() || !name->is_string() || name->get<std::string>().empty()) return false;
  call.name = name->get<std::string>();
  auto args = value->find("arguments");
  if (args == value->end()) args = value->find("parameters");
  if (args == value->end() || args->is_null()) {
    call.arguments = "{}";
    return true;
  }
  if (args->is_object()) {
    call.arguments = arguments_text(*args);
    return true;
  }
  if (args->is_string()) {
    const std::optional<RequestJson> inner = try_json(args->get<std::string>());
    if (!inner || !inner->is_object()) return false;
    call.arguments = arguments_text(*inner);
    return true;
  }
  return false;
}

}  // namespace deltaserve::server
