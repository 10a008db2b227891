// Stop strings on streamed text: text that could still turn out to be the start of a stop
// string is held back, so nothing after (or of) a stop string ever reaches the client.
// One per request, used from its session's strand only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::server {

class StopMatcher {
 public:
  struct Result {
    std::string text;      // safe to emit now
    bool matched = false;  // a stop string completed; `text` ends where it began
    std::string stop;      // the stop string that matched
  };

  StopMatcher(std::vector<std::string> stops, bool include_stop_in_output);

  Result push(std::string_view text);
  std::string finish();  // end of output without a match: release what was held

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  size_t max_stop_bytes_ = 0;
  std::string held_;
};

}  // namespace deltaserve::server
