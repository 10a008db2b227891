#include "server/tool_call_parser.h"

#include <algorithm>

#include "server/generation_job.h"

#include "server/streamed_tags.h"

namespace deltaserve::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kFunction = "<function=";

}  // namespace

void append_call_piece(std::vector<ToolCall>& calls, const ToolCall& piece) {
  if (!piece.starts && !calls.empty() && calls.back().index == piece.index && !calls.back().ends) {
    calls.back().arguments += piece.arguments;
    calls.back().ends = piece.ends;
    return;
  }
  calls.push_back(piece);
}

std::string ToolCallParser::Pieces::content() const {
  std::string out;
  for (const Segment& s : segments) {
    if (!s.is_call) out += s.content;
  }
  return out;
}

std::vector<ToolCall> ToolCallParser::Pieces::calls() const {
  std::vector<ToolCall> out;
  for (const Segment& s : segments) {
    if (s.is_call) append_call_piece(out, s.call);
  }
  return out;
}

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
    const size_t first = text.find_first_not_of(kLayoutSpace);
    if (first == std::string_view::npos) return;
    text.remove_prefix(first);
    skip_space_ = false;
  }
  if (text.empty()) return;
  if (out.segments.empty() || out.segments.back().is_call) out.segments.emplace_back();
  out.segments.back().content.append(text);
}

void ToolCallParser::emit_call(Pieces& out, ToolCall piece) {
  if (!out.segments.empty() && out.segments.back().is_call) {
    ToolCall& last = out.segments.back().call;
    if (!piece.starts && last.index == piece.index && !last.ends) {
      last.arguments += piece.arguments;
      last.ends = piece.ends;
      return;
    }
  }
  if (!piece.starts && piece.arguments.empty() && !piece.ends) return;  // nothing new
  Segment segment;
  segment.is_call = true;
  segment.call = std::move(piece);
  out.segments.push_back(std::move(segment));
}

ToolCallParser::Pieces ToolCallParser::push(std::string_view text) {
  Pieces out;
  held_.append(text);
  while (step(out)) {
  }
  return out;
}

bool ToolCallParser::step(Pieces& out) {
  switch (mode_) {
    case Mode::Text: return step_text(out);
    case Mode::Head: return step_head(out);
    case Mode::Buffered: return step_buffered(out);
    case Mode::Call: {
      XmlCallArguments::Step step = xml_->push(held_);
      held_.clear();
      ToolCall piece;
      piece.index = num_calls_ - 1;
      piece.starts = false;
      piece.ends = step.ended;
      piece.arguments = std::move(step.arguments);
      emit_call(out, std::move(piece));
      if (!step.ended) return false;
      xml_.reset();
      mode_ = Mode::Text;
      skip_space_ = true;  // layout between and after calls
      held_ = std::move(step.after);
      return !held_.empty();
    }
  }
  return false;
}

bool ToolCallParser::step_text(Pieces& out) {
  if (held_.empty()) return false;
  const std::string_view rest = held_;
  const size_t at = rest.find(kOpen);
  if (at != std::string_view::npos) {
    const std::string_view before = rest.substr(0, at);
    const size_t last = before.find_last_not_of(kLayoutSpace);
    const size_t text_len = last == std::string_view::npos ? 0 : last + 1;
    emit_text(out, before.substr(0, text_len));
    space_before_call_.assign(before.substr(text_len));
    held_.erase(0, at + kOpen.size());
    mode_ = Mode::Head;
    return true;
  }
  // Hold a possible start of "<tool_call>" and the whitespace before it.
  size_t keep = partial_tag_suffix(rest, kOpen);
  const std::string_view head = rest.substr(0, rest.size() - keep);
  const size_t last = head.find_last_not_of(kLayoutSpace);
  keep = rest.size() - (last == std::string_view::npos ? 0 : last + 1);
  emit_text(out, rest.substr(0, rest.size() - keep));
  held_.erase(0, rest.size() - keep);
  return false;
}

// After "<tool_call>": "<function=NAME>" starts a streamed XML call; anything else is held
// whole (a JSON call, or not a call at all).
bool ToolCallParser::step_head(Pieces& out) {
  const size_t first = held_.find_first_not_of(kLayoutSpace);
  if (first == std::string::npos) return false;
  const std::string_view s = std::string_view(held_).substr(first);
  if (s.starts_with(kFunction)) {
    const size_t gt = s.find('>', kFunction.size());
    const std::string_view raw = s.substr(kFunction.size(), gt == std::string_view::npos ? s.npos : gt - kFunction.size());
    const std::string name(trim_layout_space(raw));
    if (raw.find_first_of("<\n") != std::string_view::npos || (gt != std::string_view::npos && name.empty())) {
      mode_ = Mode::Buffered;  // not a name: the call fails at its close tag
      scan_from_ = 0;
      return true;
    }
    if (gt == std::string_view::npos) return false;
    held_.erase(0, first + gt + 1);
    start_xml_call(out, name);
    return true;
  }
  if (kFunction.starts_with(s)) return false;
  mode_ = Mode::Buffered;
  scan_from_ = 0;
  return true;
}

void ToolCallParser::start_xml_call(Pieces& out, std::string name) {
  ToolCall piece;
  piece.index = num_calls_++;
  piece.id = make_request_id("call_");
  piece.arguments = "{";
  piece.starts = true;
  piece.ends = false;
  const auto tool = types_.find(name);
  xml_.emplace(tool == types_.end() ? nullptr : &tool->second);
  piece.name = std::move(name);
  space_before_call_.clear();
  emit_call(out, std::move(piece));
  mode_ = Mode::Call;
}

bool ToolCallParser::step_buffered(Pieces& out) {
  const size_t at = held_.find(kClose, std::min(scan_from_, held_.size()));
  if (at == std::string::npos) {
    // Only the last bytes can begin the close tag next time.
    scan_from_ = held_.size() >= kClose.size() ? held_.size() - kClose.size() + 1 : 0;
    return false;
  }
  end_buffered(out, std::string_view(held_).substr(0, at));
  held_.erase(0, at + kClose.size());
  mode_ = Mode::Text;
  return true;
}

ToolCallParser::Pieces ToolCallParser::finish() {
  Pieces out;
  std::string held = std::move(held_);
  held_.clear();
  switch (mode_) {
    case Mode::Text:  // held: whitespace and a possible start of "<tool_call>"
      if (!calls_only_) emit_text(out, held);
      break;
    case Mode::Head:
    case Mode::Buffered:  // never closed: the model's bytes go out as they came
      if (!calls_only_) emit_text(out, space_before_call_ + std::string(kOpen) + held);
      break;
    case Mode::Call: {
      ToolCall piece;
      piece.index = num_calls_ - 1;
      piece.starts = false;
      piece.arguments = xml_->finish();  // held is empty: the call's bytes are in xml_
      emit_call(out, std::move(piece));
      xml_.reset();
      break;
    }
  }
  mode_ = Mode::Text;
  space_before_call_.clear();
  return out;
}

void ToolCallParser::end_buffered(Pieces& out, std::string_view body) {
  ToolCall call;
  const std::string_view trimmed = trim_layout_space(body);
  if (trimmed.starts_with("{") && parse_json(trimmed, call)) {
    call.index = num_calls_++;
    call.id = make_request_id("call_");
    emit_call(out, std::move(call));
    skip_space_ = true;  // layout between and after calls
  } else {
    emit_text(out, space_before_call_ + std::string(kOpen) + std::string(body) + std::string(kClose));
  }
  space_before_call_.clear();
}

// {"name": NAME, "arguments": {...}}  ("parameters" is accepted for "arguments"; arguments
// given as a JSON string holding an object are decoded).
bool ToolCallParser::parse_json(std::string_view body, ToolCall& call) const {
  const std::optional<RequestJson> value = try_decode_json(body);
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
    call.arguments = compact_json(*args);
    return true;
  }
  if (args->is_string()) {
    const std::optional<RequestJson> inner = try_decode_json(args->get<std::string>());
    if (!inner || !inner->is_object()) return false;
    call.arguments = compact_json(*inner);
    return true;
  }
  return false;
}

}  // namespace deltaserve::server
