// UTF-8 helpers for streamed text: a token can end in the middle of a character, and text
// that reaches JSON must be valid UTF-8 (nlohmann::json refuses to dump anything else).
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deltaserve::server {

// Length of the longest prefix of `bytes` that does not end inside a character that later
// bytes could still complete. Invalid bytes count as complete (sanitize_utf8 replaces them).
size_t utf8_complete_prefix(std::string_view bytes);

// `bytes` with every invalid or truncated sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

// Bytes of the longest prefix of `text` that is shorter than `max_bytes` and ends on a
// character boundary (for cutting text at a stop string without splitting a character).
size_t utf8_floor(std::string_view text, size_t max_bytes);

// Counts the characters (code points) of text that arrives in pieces, as the decoder writes
// them: a character split across pieces counts once, when its last byte arrives, and each
// invalid byte counts as the U+FFFD that replaces it. Completions logprobs' text_offset.
// One per stream; not thread-safe.
class Utf8CharCounter {
 public:
  void push(std::string_view bytes);
  size_t chars() const { return chars_; }  // characters complete so far

 private:
  std::string pending_;  // the bytes of a character not finished yet
  size_t chars_ = 0;
};

}  // namespace deltaserve::server
