#include "server/utf8.h"

namespace deltaserve::server {
namespace {

// Expected length of a sequence from its lead byte; 0 for a byte that cannot lead.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Whether bytes[i..i+len) is a well-formed sequence (no overlongs, no surrogates, <= U+10FFFF).
bool valid_sequence(std::string_view bytes, size_t i, size_t len) {
  const auto b0 = static_cast<unsigned char>(bytes[i]);
  for (size_t k = 1; k < len; ++k) {
    if (!is_continuation(static_cast<unsigned char>(bytes[i + k]))) return false;
  }
  if (len < 3) return true;
  const auto b1 = static_cast<unsigned char>(bytes[i + 1]);
  if (b0 == 0xE0 && b1 < 0xA0) return false;   // overlong
  if (b0 == 0xED && b1 >= 0xA0) return false;  // surrogate
  if (b0 == 0xF0 && b1 < 0x90) return false;   // overlong
  if (b0 == 0xF4 && b1 >= 0x90) return false;  // > U+10FFFF
  return true;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view bytes) {
  // Only the last (up to 3) bytes can be an unfinished character.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(bytes[n - back]);
    if (is_continuation(b)) continue;
    const size_t len = sequence_length(b);
    if (len > back) {
      // A lead byte whose sequence is not finished: hold it back if what follows so far
      // is still a valid beginning.
      for (size_t k = n - back + 1; k < n; ++k) {
        if (!is_continuation(static_cast<unsigned char>(bytes[k]))) return n;
      }
      return n - back;
    }
    return n;
  }
  return n;
}

std::string sanitize_utf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const size_t len = sequence_length(static_cast<unsigned char>(bytes[i]));
    if (len != 0 && i + len <= bytes.size() && valid_sequence(bytes, i, len)) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  return out;
}

size_t utf8_floor(std::string_view text, size_t max_bytes) {
  if (max_bytes >= text.size()) return text.size();
  size_t i = max_bytes;
  while (i > 0 && is_continuation(static_cast<unsigned char>(text[i]))) --i;
  return i;
}

void Utf8CharCounter::push(std::string_view bytes) {
  pending_.append(bytes);
  const size_t done = utf8_complete_prefix(pending_);
  for (const char c : sanitize_utf8(std::string_view(pending_).substr(0, done))) {
    if (!is_continuation(static_cast<unsigned char>(c))) ++chars_;
  }
  pending_.erase(0, done);
}

}  // namespace deltaserve::server
