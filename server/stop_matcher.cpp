#include "server/stop_matcher.h"

#include <algorithm>

namespace deltaserve::server {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop_in_output)
    : stops_(std::move(stops)), include_stop_(include_stop_in_output) {
  for (const std::string& s : stops_) max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result r;
  if (stops_.empty()) {
    r.text.assign(text);
    return r;
  }
  held_.append(text);
  // The earliest match wins; at equal positions the longer stop string.
  size_t best_at = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    if (at < best_at || (at == best_at && s.size() > best->size())) {
      best_at = at;
      best = &s;
    }
  }
  if (best) {
    r.matched = true;
    r.stop = *best;
    r.text = held_.substr(0, include_stop_ ? best_at + best->size() : best_at);
    held_.clear();
    return r;
  }
  // Hold the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(held_.size(), s.size() - 1);
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::finish() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace deltaserve::server
