#include "runtime/stop_string_matcher.h"

#include <algorithm>

namespace deltaserve::runtime {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    stops_.push_back(std::move(stop_strings[i]));
    stop_indices_.push_back(static_cast<int32_t>(i));
  }
}

size_t StopStringMatcher::longest_partial_match(std::string_view text) const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, text.size());
    for (size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

StopStringMatcher::Output StopStringMatcher::feed(std::string_view text) {
  Output out;
  if (stopped_) return out;
  if (stops_.empty()) {
    out.text.assign(text);
    return out;
  }
  held_.append(text);
  // The earliest occurrence of any stop string wins; the first listed among equals. Held
  // text holds no complete stop string (it would have matched), so a match found now ends
  // in the new text.
  size_t match_pos = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = held_.find(stops_[i]);
    if (pos < match_pos) {
      match_pos = pos;
      out.stop_index = stop_indices_[i];
    }
  }
  if (match_pos != std::string::npos) {
    out.text = held_.substr(0, match_pos);
    out.stopped = stopped_ = true;
    held_.clear();
    return out;
  }
  const size_t keep = longest_partial_match(held_);
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return stopped_ ? std::string() : out;
}

}  // namespace deltaserve::runtime
