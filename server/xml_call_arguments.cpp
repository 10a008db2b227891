#include "server/xml_call_arguments.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/utf8.h"

#include "server/streamed_tags.h"

namespace deltaserve::server {
namespace {

constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";
constexpr int kMaxJsonDepth = 64;

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

// The value between "<parameter=P>" and "</parameter>" without the template's layout: one
// newline after the opening tag and one before the closing tag.
std::string_view strip_layout(std::string_view value) {
  if (value.starts_with('\n')) value.remove_prefix(1);
  if (value.ends_with('\n')) value.remove_suffix(1);
  return value;
}

bool is_prefix_of(std::string_view s, std::string_view tag) { return tag.starts_with(s); }

}  // namespace

std::string json_string_body(std::string_view text) {
  const std::string quoted = compact_json(RequestJson(sanitize_utf8(text)));
  return quoted.substr(1, quoted.size() - 2);
}

std::optional<RequestJson> try_decode_json(std::string_view text) {
  if (!within_depth(text)) return std::nullopt;
  try {
    return parse_request_json(text);
  } catch (const ApiException&) {
    return std::nullopt;
  }
}

std::string compact_json(const RequestJson& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

XmlCallArguments::Step XmlCallArguments::push(std::string_view text) {
  Step out;
  buf_.append(text);
  while (!out.ended && step(out)) {
  }
  return out;
}

bool XmlCallArguments::step(Step& out) {
  switch (mode_) {
    case Mode::Params: return step_params(out);
    case Mode::StringValue: return step_string_value(out);
    case Mode::JsonValue:
    case Mode::SkipValue: return step_buffered_value(out);
    case Mode::AfterFunction: return step_after_function(out);
    case Mode::Discard: return step_discard(out);
  }
  return false;
}

void XmlCallArguments::end_call(Step& out, size_t consumed) {
  out.arguments += '}';
  out.ended = true;
  out.after = buf_.substr(consumed);
  buf_.clear();
}

// Drops the layout whitespace at the front of buf_; false when nothing else is there yet.
bool XmlCallArguments::drop_layout_space() {
  const size_t first = buf_.find_first_not_of(kLayoutSpace);
  buf_.erase(0, first == std::string::npos ? buf_.size() : first);
  return !buf_.empty();
}

// Between parameters: layout whitespace, then "<parameter=P>", "</function>" or (the model
// skipped "</function>") "</tool_call>".
bool XmlCallArguments::step_params(Step& out) {
  if (!drop_layout_space()) return false;
  const std::string_view s = buf_;
  if (s.starts_with(kParameter)) {
    const size_t gt = s.find('>', kParameter.size());
    const std::string_view raw_name = s.substr(kParameter.size(), gt == std::string_view::npos ? s.npos : gt - kParameter.size());
    if (raw_name.find_first_of("<\n") != std::string_view::npos) {
      mode_ = Mode::Discard;
      return true;
    }
    if (gt == std::string_view::npos) return false;
    const std::string name(trim_layout_space(raw_name));
    if (name.empty()) {
      mode_ = Mode::Discard;
      return true;
    }
    buf_.erase(0, gt + 1);
    scan_from_ = 0;
    if (!seen_.insert(name).second) {
      mode_ = Mode::SkipValue;
      return true;
    }
    if (num_params_++ > 0) out.arguments += ',';
    out.arguments += '"' + json_string_body(name) + "\":";
    bool json_typed = false;
    if (json_params_) {
      const auto it = json_params_->find(name);
      json_typed = it != json_params_->end() && it->second;
    }
    if (json_typed) {
      mode_ = Mode::JsonValue;
    } else {
      mode_ = Mode::StringValue;
      value_started_ = false;
      out.arguments += '"';
    }
    return true;
  }
  if (s.starts_with(kFunctionEnd)) {
    buf_.erase(0, kFunctionEnd.size());
    mode_ = Mode::AfterFunction;
    return true;
  }
  if (s.starts_with(kClose)) {
    end_call(out, kClose.size());
    return false;
  }
  if (is_prefix_of(s, kParameter) || is_prefix_of(s, kFunctionEnd) || is_prefix_of(s, kClose)) return false;
  mode_ = Mode::Discard;
  scan_from_ = 0;
  return true;
}

// A string value streams out as it comes, less what may still turn out to be its end.
bool XmlCallArguments::step_string_value(Step& out) {
  if (!value_started_) {
    if (buf_.empty()) return false;
    if (buf_.front() == '\n') buf_.erase(0, 1);
    value_started_ = true;
  }
  const size_t param_end = buf_.find(kParameterEnd);
  const size_t close = buf_.find(kClose);
  const size_t at = std::min(param_end, close);
  if (at != std::string::npos) {
    std::string_view value = std::string_view(buf_).substr(0, at);
    if (value.ends_with('\n')) value.remove_suffix(1);
    out.arguments += json_string_body(value) + '"';
    if (at == param_end) {
      buf_.erase(0, at + kParameterEnd.size());
      mode_ = Mode::Params;
      return true;
    }
    end_call(out, at + kClose.size());
    return false;
  }
  size_t ready = buf_.size() - std::max(partial_tag_suffix(buf_, kParameterEnd), partial_tag_suffix(buf_, kClose));
  if (ready > 0 && buf_[ready - 1] == '\n') --ready;  // maybe the layout before the closing tag
  ready = utf8_complete_prefix(std::string_view(buf_).substr(0, ready));
  out.arguments += json_string_body(std::string_view(buf_).substr(0, ready));
  buf_.erase(0, ready);
  return false;
}

std::string XmlCallArguments::buffered_value_json(std::string_view value) const {
  value = strip_layout(value);
  if (const std::optional<RequestJson> decoded = try_decode_json(value)) return compact_json(*decoded);
  return '"' + json_string_body(value) + '"';
}

// A JSON-typed value (or a duplicate to drop) is held whole until its closing tag.
bool XmlCallArguments::step_buffered_value(Step& out) {
  const size_t from = std::min(scan_from_, buf_.size());
  const size_t param_end = buf_.find(kParameterEnd, from);
  const size_t close = buf_.find(kClose, from);
  const size_t at = std::min(param_end, close);
  if (at == std::string::npos) {
    // Only the last bytes can begin a closing tag next time.
    scan_from_ = buf_.size() >= kParameterEnd.size() ? buf_.size() - kParameterEnd.size() + 1 : 0;
    return false;
  }
  if (mode_ == Mode::JsonValue) out.arguments += buffered_value_json(std::string_view(buf_).substr(0, at));
  if (at == param_end) {
    buf_.erase(0, at + kParameterEnd.size());
    mode_ = Mode::Params;
    return true;
  }
  end_call(out, at + kClose.size());
  return false;
}

bool XmlCallArguments::step_after_function(Step& out) {
  if (!drop_layout_space()) return false;
  if (std::string_view(buf_).starts_with(kClose)) {
    end_call(out, kClose.size());
    return false;
  }
  if (is_prefix_of(buf_, kClose)) return false;
  mode_ = Mode::Discard;
  scan_from_ = 0;
  return true;
}

// Bytes that break the format are dropped up to "</tool_call>".
bool XmlCallArguments::step_discard(Step& out) {
  const size_t at = buf_.find(kClose);
  if (at != std::string::npos) {
    end_call(out, at + kClose.size());
    return false;
  }
  buf_.erase(0, buf_.size() - partial_tag_suffix(buf_, kClose));
  return false;
}

std::string XmlCallArguments::finish() {
  std::string out;
  // What was held back as the possible start of a closing tag is the call's markup cut
  // short, not the value: it (and the layout newline before it) stays out of the arguments.
  std::string_view held = buf_;
  held.remove_suffix(std::max(partial_tag_suffix(held, kParameterEnd), partial_tag_suffix(held, kClose)));
  if (held.ends_with('\n')) held.remove_suffix(1);
  switch (mode_) {
    case Mode::StringValue: {
      std::string_view value = held;
      if (!value_started_ && value.starts_with('\n')) value.remove_prefix(1);
      out = json_string_body(value) + '"';
      break;
    }
    case Mode::JsonValue: out = buffered_value_json(held); break;
    default: break;
  }
  buf_.clear();
  mode_ = Mode::Discard;
  return out + '}';
}

}  // namespace deltaserve::server
