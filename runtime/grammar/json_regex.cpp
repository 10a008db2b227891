#include "runtime/grammar/json_regex.h"

#include <algorithm>
#include <cctype>

namespace deltaserve::runtime::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged, with the surrogates D800-DFFF removed (no valid string holds them).
Ranges normalize(Ranges r) {
  Ranges split;
  for (const auto& [lo, hi] : r) {
    if (lo <= 0xD7FF) split.emplace_back(lo, std::min<uint32_t>(hi, 0xD7FF));
    if (hi >= 0xE000) split.emplace_back(std::max<uint32_t>(lo, 0xE000), hi);
  }
  std::sort(split.begin(), split.end());
  Ranges out;
  for (const auto& [lo, hi] : split) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return normalize(out);
}

RegexNode chars(Ranges r) {
  RegexNode n;
  n.kind = RegexNode::kChars;
  n.ranges = normalize(std::move(r));
  return n;
}

RegexNode repeat(RegexNode inner, int min, int max) {
  RegexNode n;
  n.kind = RegexNode::kRepeat;
  n.min = min;
  n.max = max;
  n.children.push_back(std::move(inner));
  return n;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  RegexNode alternation() {
    RegexNode alt;
    alt.kind = RegexNode::kAlternation;
    alt.children.push_back(sequence());
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alt.children.push_back(sequence());
    }
    return alt.children.size() == 1 ? std::move(alt.children[0]) : alt;
  }
  bool done() const { return i_ >= p_.size(); }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw RegexError(what + " (at offset " + std::to_string(i_) + ") is not supported");
  }

  RegexNode sequence() {
    RegexNode seq;
    seq.kind = RegexNode::kConcat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      RegexNode a = atom();
      quantify(a);
      seq.children.push_back(std::move(a));
    }
    return seq;
  }

  // Applies a quantifier after an atom, if one follows.
  void quantify(RegexNode& a) {
    if (i_ >= p_.size()) return;
    int min = 0, max = -1;
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '{') {
      ++i_;
      min = number();
      max = min;
      if (i_ < p_.size() && p_[i_] == ',') {
        ++i_;
        max = i_ < p_.size() && p_[i_] == '}' ? -1 : number();
      }
      if (i_ >= p_.size() || p_[i_] != '}') fail("a '{' that is not a {m}, {m,} or {m,n} quantifier");
      ++i_;
      if (max != -1 && max < min) fail("a quantifier {m,n} with n < m");
    } else {
      return;
    }
    if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same strings
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{'))
      fail("a quantifier after a quantifier");
    a = repeat(std::move(a), min, max);
  }

  int number() {
    const size_t start = i_;
    long v = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_++] - '0');
      if (v > kMaxRegexRepeat) fail("a repeat count above " + std::to_string(kMaxRegexRepeat));
    }
    if (i_ == start) fail("a '{' that is not a {m}, {m,} or {m,n} quantifier");
    return static_cast<int>(v);
  }

  RegexNode atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          fail("'(?' other than '(?:' (lookaround, a named group or inline flags)");
        }
      }
      RegexNode inner = alternation();
      if (i_ >= p_.size() || p_[i_] != ')') fail("an unclosed group");
      ++i_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return chars(complement(kLineTerminators));
    }
    if (c == '\\') return chars(escape(false));
    if (c == '^' || c == '$') fail("an anchor not at the start or end of the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    const uint32_t cp = literal();
    return chars({{cp, cp}});
  }

  // One UTF-8 encoded character of the pattern.
  uint32_t literal() {
    const auto b = static_cast<uint8_t>(p_[i_++]);
    if (b < 0x80) return b;
    const int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
    uint32_t cp = b & (0x3F >> extra);
    for (int k = 0; k < extra && i_ < p_.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(p_[i_++]) & 0x3F);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) fail("a malformed \\x or \\u escape");
      const char h = p_[i_++];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash: the set it stands for. in_class: \b is backspace there.
  Ranges escape(bool in_class) {
    ++i_;
    if (i_ >= p_.size()) fail("a pattern ending in a backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': return kDigit;
      case 'D': return complement(kDigit);
      case 'w': return kWord;
      case 'W': return complement(kWord);
      case 's': return kSpace;
      case 'S': return complement(kSpace);
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 't': return {{'\t', '\t'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case 'x': {
        const uint32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && p_.substr(i_, 2) == "\\u") {
          i_ += 2;
          const uint32_t low = hex(4);
          if (low < 0xDC00 || low > 0xDFFF) fail("a lone surrogate escape");
          v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
        } else if (v >= 0xD800 && v <= 0xDFFF) {
          fail("a lone surrogate escape");
        }
        return {{v, v}};
      }
      case '0':
        if (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_]))) fail("an octal escape");
        return {{0, 0}};
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        fail("\\b (a word boundary)");
      case 'B': fail("\\B (a word boundary)");
      case 'k': fail("\\k (a named backreference)");
      case 'p':
      case 'P': fail("\\p{...} (a Unicode property class)");
      case 'c': fail("\\c (a control escape)");
      default: break;
    }
    if (c >= '1' && c <= '9') fail("a backreference \\" + std::string(1, c));
    if (std::isalnum(static_cast<unsigned char>(c))) fail("the escape \\" + std::string(1, c));
    --i_;
    const uint32_t cp = literal();  // an escaped syntax (or any other non-letter) character
    return {{cp, cp}};
  }

  Ranges class_atom(bool& single) {
    if (p_[i_] == '\\') {
      Ranges r = escape(true);
      single = r.size() == 1 && r[0].first == r[0].second;
      return r;
    }
    const uint32_t cp = literal();
    single = true;
    return {{cp, cp}};
  }

  RegexNode char_class() {
    ++i_;  // '['
    bool negate = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    Ranges set;
    while (true) {
      if (i_ >= p_.size()) fail("an unclosed class '['");
      if (p_[i_] == ']') break;
      // One class atom; a single character may start a range.
      bool single = false;
      const Ranges first = class_atom(single);
      if (single && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        bool single_hi = false;
        const Ranges last = class_atom(single_hi);
        if (!single_hi) fail("a class range with a set (\\d, \\w, \\s) as a bound");
        if (last[0].first < first[0].first) fail("a class range out of order");
        set.emplace_back(first[0].first, last[0].first);
        continue;
      }
      set.insert(set.end(), first.begin(), first.end());
    }
    ++i_;  // ']'
    return chars(negate ? complement(set) : set);
  }

  std::string_view p_;
  size_t i_ = 0;
};

}  // namespace

RegexNode parse_regex(const std::string& pattern) {
  std::string_view body = pattern;
  const bool anchored_start = !body.empty() && body.front() == '^';
  if (anchored_start) body.remove_prefix(1);
  // A final '$' anchors unless it is escaped (an odd number of backslashes before it).
  size_t backslashes = 0;
  while (body.size() >= backslashes + 2 && body[body.size() - 2 - backslashes] == '\\') ++backslashes;
  const bool anchored_end = !body.empty() && body.back() == '$' && backslashes % 2 == 0;
  if (anchored_end) body.remove_suffix(1);
  Parser parser(body);
  RegexNode inner = parser.alternation();
  if (!parser.done()) throw RegexError("an unmatched ')' is not supported");
  RegexNode whole;
  whole.kind = RegexNode::kConcat;
  const RegexNode anything = repeat(chars({{0, kMaxCodePoint}}), 0, -1);
  if (!anchored_start) whole.children.push_back(anything);
  whole.children.push_back(std::move(inner));
  if (!anchored_end) whole.children.push_back(anything);
  return whole;
}

}  // namespace deltaserve::runtime::grammar
