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

bool is_upper(char32_t c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char32_t c) { return c >= 'a' && c <= 'z'; }
char32_t to_upper(char32_t c) { return is_lower(c) ? c - 32 : c; }
char32_t to_lower(char32_t c) { return is_upper(c) ? c + 32 : c; }

}  // namespace

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(to_upper(static_cast<unsigned char>(c)));
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(to_lower(static_cast<unsigned char>(c)));
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    bool cased = is_upper(u) || is_lower(u);
    if (cased) c = static_cast<char>(previous_cased ? to_lower(u) : to_upper(u));
    previous_cased = cased || (u >= 0x80 && previous_cased);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(to_upper(static_cast<unsigned char>(out[0])));
  return out;
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
