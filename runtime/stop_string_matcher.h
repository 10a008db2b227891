// Stop strings over streamed, detokenised text: matched across token boundaries and never
// emitted. Text that could still be the start of a stop string is held back and released
// as soon as it cannot be.
//
// Input is the StreamingDetokenizer's output (valid UTF-8); held-back text always starts at
// the first byte of a possible stop string, so what is released ends on a character
// boundary. Owner: one per request, one thread at a time (the session's strand). Never
// blocks; work per feed is O((held + new bytes) x total stop-string bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::runtime {

class StopStringMatcher {
 public:
  // Empty strings are ignored (the server rejects them; they would match everywhere).
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Output {
    std::string text;         // safe to emit now
    bool stopped = false;     // a stop string matched: `text` ends right before it
    int32_t stop_index = -1;  // which stop string (index into the constructor's list)
  };

  // Feeds newly decoded text. After a match every later feed returns nothing.
  Output feed(std::string_view text);
  // Generation ended without a match (EOS, max_tokens): releases the held text.
  std::string flush();

  bool stopped() const { return stopped_; }
  size_t num_held_bytes() const { return held_.size(); }
  bool empty() const { return stops_.empty(); }

 private:
  // Length of the longest suffix of `text` that is a proper prefix of some stop string.
  size_t longest_partial_match(std::string_view text) const;

  std::vector<std::string> stops_;
  std::vector<int32_t> stop_indices_;  // stops_[i] was the constructor's stop_indices_[i]
  std::string held_;
  bool stopped_ = false;
};

}  // namespace deltaserve::runtime
