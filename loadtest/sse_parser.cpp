#include "loadtest/sse_parser.h"

namespace deltaserve::loadtest {

bool SseParser::feed(std::string_view bytes, std::vector<std::string>& events) {
  for (const char c : bytes) {
    if (c == '\n' && after_cr_) {  // the "\n" of a "\r\n" whose "\r" already ended the line
      after_cr_ = false;
      continue;
    }
    after_cr_ = (c == '\r');
    if (c == '\r' || c == '\n') {
      on_line(line_, events);
      line_.clear();
      continue;
    }
    if (line_.size() >= max_line_bytes_) return false;
    line_.push_back(c);
  }
  return true;
}

void SseParser::on_line(std::string_view line, std::vector<std::string>& events) {
  if (line.empty()) {  // blank line: dispatch
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive ping)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;  // event, id, retry: not used by the OpenAI stream
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace deltaserve::loadtest
