#include "server/jinja/py_string.h"

#include "server/jinja/template_error.h"

namespace deltaserve::jinja::py {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (extra == 0) {
      out += static_cast<char32_t>(c);
      ++i;
      continue;
    }
    if (extra < 0 || i + static_cast<size_t>(extra) >= s.size()) {
      out += static_cast<char32_t>(c);  // invalid or truncated: keep the byte
      ++i;
      continue;
    }
    char32_t cp = extra == 0 ? c : extra == 1 ? (c & 0x1f) : extra == 2 ? (c & 0x0f) : (c & 0x07);
    bool valid = true;
    for (int k = 1; k <= extra; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) {
        valid = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!valid) {
      out += static_cast<char32_t>(c);
      ++i;
      continue;
    }
    out += cp;
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    // Bytes of invalid UTF-8 were decoded as 0x80..0xFF; a real U+0080..U+00FF re-encodes to
    // two bytes, which is the price of never throwing on bad input.
    append_utf8(out, cp);
  }
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return decode(s).size();
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step) {
  int64_t st = step.value_or(1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index;
    if (i < 0) {
      i += length;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= length) {
      i = st < 0 ? length - 1 : length;
    }
    return i;
  };
  int64_t begin = adjust(start, st < 0 ? length - 1 : 0);
  int64_t end = adjust(stop, st < 0 ? -1 : length);
  std::vector<int64_t> out;
  for (int64_t i = begin; st > 0 ? i < end : i > end; i += st) out.push_back(i);
  return out;
}

std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step) {
  if (is_ascii(s)) {
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(s.size()), start, stop, step)) {
      out += s[static_cast<size_t>(i)];
    }
    return out;
  }
  std::u32string cps = decode(s);
  std::u32string out;
  for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step)) {
    out += cps[static_cast<size_t>(i)];
  }
  return encode(out);
}

std::optional<std::string> at(std::string_view s, int64_t index) {
  std::u32string cps = decode(s);
  int64_t n = static_cast<int64_t>(cps.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return encode(std::u32string_view(&cps[static_cast<size_t>(index)], 1));
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, StripSide side) {
  std::u32string cps = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_space(c);
  };
  size_t begin = 0;
  size_t end = cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw TemplateError("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string cps = decode(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !is_space(cps[j])) ++j;
    out.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw TemplateError("empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string cps = decode(s);
    size_t j = cps.size();
    while (true) {
      while (j > 0 && is_space(cps[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode(std::u32string_view(cps).substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !is_space(cps[i - 1])) --i;
      out.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
      j = i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string cps = decode(s);
  std::vector<std::string> out;
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                    c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t end = i + ((c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1);
    out.push_back(encode(std::u32string_view(cps).substr(start, (keepends ? end : i) - start)));
    start = i = end;
  }
  if (start < cps.size()) out.push_back(encode(std::u32string_view(cps).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view replacement,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string cps = decode(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += replacement;
    pos = hit + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

namespace {

// Simple (one-to-one) case mappings for ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and
// fullwidth Latin: what European-language text needs. Python's full tables also cover the
// rest of Unicode and multi-character mappings (ß -> SS), which we leave unchanged.
char32_t pair_upper(char32_t c, char32_t first, char32_t last, bool even_is_upper) {
  if (c < first || c > last) return 0;
  bool odd = (c & 1) != 0;
  return odd == even_is_upper ? c - 1 : c;
}

char32_t upper_cp(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 0x20;
  if (c == 0xff) return 0x178;
  if (c == 0xb5) return 0x39c;
  if (c == 0x131) return 'I';
  if (c == 0x17f) return 'S';
  if (char32_t u = pair_upper(c, 0x100, 0x137, true)) return u;
  if (char32_t u = pair_upper(c, 0x139, 0x148, false)) return u;
  if (char32_t u = pair_upper(c, 0x14a, 0x177, true)) return u;
  if (char32_t u = pair_upper(c, 0x179, 0x17e, false)) return u;
  if (c >= 0x3b1 && c <= 0x3c9) return c == 0x3c2 ? 0x3a3 : c - 0x20;
  if (c == 0x3ac) return 0x386;
  if (c >= 0x3ad && c <= 0x3af) return c - 0x25;
  if (c == 0x3cc) return 0x38c;
  if (c == 0x3cd || c == 0x3ce) return c - 0x3f;
  if (c >= 0x430 && c <= 0x44f) return c - 0x20;
  if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  if (char32_t u = pair_upper(c, 0x460, 0x481, true)) return u;
  if (char32_t u = pair_upper(c, 0x48a, 0x4bf, true)) return u;
  if (c >= 0xff41 && c <= 0xff5a) return c - 0x20;
  return c;
}

char32_t lower_cp(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 0x20;
  if (c == 0x178) return 0xff;
  auto pair_lower = [c](char32_t first, char32_t last, bool even_is_upper) -> char32_t {
    if (c < first || c > last) return 0;
    bool odd = (c & 1) != 0;
    return odd == even_is_upper ? c : c + 1;
  };
  if (char32_t l = pair_lower(0x100, 0x137, true)) return l == 0x130 + 1 ? c : l;
  if (char32_t l = pair_lower(0x139, 0x148, false)) return l;
  if (char32_t l = pair_lower(0x14a, 0x177, true)) return l;
  if (char32_t l = pair_lower(0x179, 0x17e, false)) return l;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 0x20;
  if (c == 0x386) return 0x3ac;
  if (c >= 0x388 && c <= 0x38a) return c + 0x25;
  if (c == 0x38c) return 0x3cc;
  if (c == 0x38e || c == 0x38f) return c + 0x3f;
  if (c >= 0x410 && c <= 0x42f) return c + 0x20;
  if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  if (char32_t l = pair_lower(0x460, 0x481, true)) return l;
  if (char32_t l = pair_lower(0x48a, 0x4bf, true)) return l;
  if (c >= 0xff21 && c <= 0xff3a) return c + 0x20;
  return c;
}

bool is_cased(char32_t c) { return upper_cp(c) != c || lower_cp(c) != c || c == 0xdf; }

template <typename Fn>
std::string map_code_points(std::string_view s, Fn&& fn) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(fn(static_cast<unsigned char>(c)));
    return out;
  }
  std::u32string cps = decode(s);
  for (char32_t& c : cps) c = fn(c);
  return encode(cps);
}

}  // namespace

std::string upper(std::string_view s) {
  std::string out = map_code_points(s, upper_cp);
  // The one multi-character mapping European text meets: 'ß'.upper() == 'SS'.
  return out.find("\xc3\x9f") == std::string::npos ? out : replace(out, "\xc3\x9f", "SS", -1);
}

std::string lower(std::string_view s) { return map_code_points(s, lower_cp); }

std::string title(std::string_view s) {
  bool previous_cased = false;
  return map_code_points(s, [&](char32_t c) {
    bool cased = is_cased(c);
    char32_t out = cased ? (previous_cased ? lower_cp(c) : upper_cp(c)) : c;
    previous_cased = cased;
    return out;
  });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](char32_t c) {
    char32_t out = first ? upper_cp(c) : lower_cp(c);
    first = false;
    return out;
  });
}

bool has_only_case(std::string_view s, bool upper_case) {
  bool any = false;
  for (char32_t c : decode(s)) {
    if (!is_cased(c)) continue;
    any = true;
    bool is_lower_char = upper_cp(c) != c || c == 0xdf;
    if (is_lower_char == upper_case) return false;
  }
  return any;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) {
    ++n;
  }
  return n;
}

}  // namespace deltaserve::jinja::py
