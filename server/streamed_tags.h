// Small text helpers shared by the parsers of streamed model output (reasoning splitter, tool
// call parser, XML call arguments), which must hold back text that may turn into a tag once
// the next token arrives. Pure functions; any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace deltaserve::server {

// The layout whitespace of the templates' tags.
inline constexpr std::string_view kLayoutSpace = " \t\r\n";

// Length of the longest suffix of `text` that is a proper prefix of `tag`: the bytes to hold
// back because the next token may complete the tag.
inline size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const size_t max_len = std::min(text.size(), tag.size() - 1);
  for (size_t len = max_len; len > 0; --len) {
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  }
  return 0;
}

// `s` without leading and trailing layout whitespace.
inline std::string_view trim_layout_space(std::string_view s) {
  const size_t first = s.find_first_not_of(kLayoutSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kLayoutSpace) - first + 1);
}

}  // namespace deltaserve::server
