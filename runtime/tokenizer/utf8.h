// UTF-8 stepping with the Unicode "maximal subpart" rule for ill-formed input (the rule
// Python's errors="replace", Rust's from_utf8_lossy and WHATWG decoders share), so our
// lossy decode agrees with Hugging Face's byte-for-byte. Header-only; pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deltaserve::runtime::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class StepKind : uint8_t {
  Valid,       // a whole well-formed character of `length` bytes
  Invalid,     // `length` bytes (>= 1) form a maximal ill-formed subpart: one U+FFFD
  Incomplete,  // the text ends inside a character whose `length` bytes so far are fine
};

struct Step {
  StepKind kind;
  uint8_t length;
  uint32_t code_point;  // only for Valid
};

// Classifies the character starting at s[pos] (pos < s.size()).
inline Step next(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return {StepKind::Valid, 1, b0};
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) { need = 1; cp = b0 & 0x1F; }
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2; cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3; cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {StepKind::Invalid, 1, 0};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {StepKind::Incomplete, static_cast<uint8_t>(k), 0};
    const uint8_t b = byte(pos + k);
    const uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {StepKind::Invalid, static_cast<uint8_t>(k), 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {StepKind::Valid, static_cast<uint8_t>(need + 1), cp};
}

inline void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
    const Step st = next(s, i);
    if (st.kind != StepKind::Valid) return false;
    i += st.length;
  }
  return true;
}

// Appends `s` to `out` with every ill-formed subpart (and a truncated tail) replaced by
// U+FFFD.
inline void append_lossy(std::string& out, std::string_view s) {
  size_t run = 0;  // start of the pending run of valid bytes
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
    const Step st = next(s, i);
    if (st.kind == StepKind::Valid) { i += st.length; continue; }
    out.append(s.substr(run, i - run));
    out.append(kReplacement);
    i += st.length;
    run = i;
  }
  out.append(s.substr(run));
}

}  // namespace deltaserve::runtime::utf8
