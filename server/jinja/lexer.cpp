#include "server/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "server/jinja/py_string.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.rstrip() / "\s" for the ASCII whitespace a template realistically contains.
std::string_view rstrip_ws(std::string_view s) {
  while (!s.empty() && (is_ws(s.back()) || (s.back() >= 0x1c && s.back() <= 0x1f))) {
    s.remove_suffix(1);
  }
  return s;
}

// jinja2 normalises "\r\n" and "\r" to "\n" and drops one trailing newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(normalize_newlines(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_data();
    emit(Token::Type::kEof, "", src_.size());
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& message, size_t offset) const {
    auto [line, column] = position(offset);
    throw TemplateError(message, line, column);
  }

  std::pair<int, int> position(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    return {static_cast<int>(line_index) + 1,
            static_cast<int>(offset - line_starts_[line_index]) + 1};
  }

  void emit(Token::Type type, std::string value, size_t offset) {
    auto [line, column] = position(offset);
    out_.push_back(Token{type, std::move(value), line, column});
  }

  // Applies {%- / lstrip_blocks to the text before a tag and emits it.
  void emit_text(std::string_view text, size_t text_offset, char modifier, bool lstrip_allowed) {
    if (modifier == '-') {
      text = rstrip_ws(text);
    } else if (modifier != '+' && options_.lstrip_blocks && lstrip_allowed) {
      size_t line_pos = text.rfind('\n');
      line_pos = line_pos == std::string_view::npos ? 0 : line_pos + 1;
      std::string_view tail = text.substr(line_pos);
      if ((line_pos > 0 || line_starting_) && !tail.empty() && rstrip_ws(tail).empty()) {
        text = text.substr(0, line_pos);
      }
    }
    if (!text.empty()) emit(Token::Type::kText, std::string(text), text_offset);
  }

  // Consumes a tag end; `-` strips all following whitespace, trim_blocks one newline (blocks and
  // comments only). Returns the offset after the tag end.
  size_t consume_end(size_t end_pos, size_t end_len, bool minus, bool plus, bool trims) {
    size_t after = end_pos + end_len;
    if (minus) {
      while (after < src_.size() && is_ws(src_[after])) ++after;
    } else if (!plus && trims && options_.trim_blocks && after < src_.size() &&
               src_[after] == '\n') {
      ++after;
    }
    line_starting_ = after > 0 && src_[after - 1] == '\n';
    return after;
  }

  void lex_data() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        emit(Token::Type::kText, src_.substr(pos_), pos_);
        pos_ = src_.size();
        return;
      }
      char kind = src_[tag + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++tag;
    }
    char kind = src_[tag + 1];
    size_t inner = tag + 2;
    char modifier = inner < src_.size() && (src_[inner] == '-' || src_[inner] == '+') ? src_[inner] : 0;
    if (modifier != 0) ++inner;
    std::string_view text = std::string_view(src_).substr(pos_, tag - pos_);
    emit_text(text, pos_, modifier, kind != '{');
    line_starting_ = false;
    if (kind == '#') {
      lex_comment(inner);
    } else if (kind == '%' && is_raw_begin(inner)) {
      lex_raw(inner);
    } else {
      emit(kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", tag);
      lex_tag(inner, kind == '%', tag);
    }
  }

  void lex_comment(size_t inner) {
    size_t end = src_.find("#}", inner);
    if (end == std::string::npos) fail("missing end of comment tag", inner - 2);
    bool minus = end > inner && src_[end - 1] == '-';
    bool plus = end > inner && src_[end - 1] == '+';
    pos_ = consume_end(end, 2, minus, plus, true);
  }

  // {% raw %} or {%- raw -%}; `inner` is just after the modifier.
  bool is_raw_begin(size_t inner) {
    size_t p = inner;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) {
      return false;
    }
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;  // jinja2 applies no trim_blocks after {% raw %}
    } else {
      return false;
    }
    raw_body_ = p;
    return true;
  }

  void lex_raw(size_t inner) {
    size_t search = raw_body_;
    while (true) {
      size_t start = src_.find("{%", search);
      if (start == std::string::npos) fail("missing end of raw directive", inner - 2);
      size_t p = start + 2;
      char modifier = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (modifier != 0) ++p;
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = start + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && is_ws(src_[p])) ++p;
      bool minus = src_.compare(p, 3, "-%}") == 0;
      bool plus = src_.compare(p, 3, "+%}") == 0;
      if (!minus && !plus && src_.compare(p, 2, "%}") != 0) {
        search = start + 2;
        continue;
      }
      line_starting_ = raw_body_ > 0 && src_[raw_body_ - 1] == '\n';
      emit_text(std::string_view(src_).substr(raw_body_, start - raw_body_), raw_body_, modifier,
                true);
      pos_ = consume_end(minus || plus ? p + 1 : p, 2, minus, plus, true);
      return;
    }
  }

  void lex_tag(size_t p, bool is_block, size_t tag_offset) {
    std::vector<char> brackets;
    const char* end_text = is_block ? "%}" : "}}";
    while (true) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (p >= src_.size()) {
        fail(std::string("unexpected end of template: ") +
                 (is_block ? "block tag '{%'" : "expression '{{'") + " is never closed",
             tag_offset);
      }
      if (brackets.empty()) {
        bool minus = src_[p] == '-' && src_.compare(p + 1, 2, end_text) == 0;
        bool plus = is_block && src_[p] == '+' && src_.compare(p + 1, 2, end_text) == 0;
        if (minus || plus || src_.compare(p, 2, end_text) == 0) {
          emit(is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", p);
          pos_ = consume_end(minus || plus ? p + 1 : p, 2, minus, plus, is_block);
          return;
        }
      }
      p = lex_tag_token(p, brackets);
    }
  }

  size_t lex_tag_token(size_t p, std::vector<char>& brackets) {
    char c = src_[p];
    if (c == '\'' || c == '"') return lex_string(p);
    bool after_dot = !out_.empty() && out_.back().type == Token::Type::kOp && out_.back().value == ".";
    if (is_digit(c)) return lex_number(p, after_dot);
    if (is_name_start(c)) {
      size_t end = p;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      emit(Token::Type::kName, src_.substr(p, end - p), p);
      return end;
    }
    static const char* const kTwoCharOps[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(p, 2, op) == 0) {
        emit(Token::Type::kOp, op, p);
        return p + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      fail(std::string("unexpected character '") + c + "' in tag", p);
    }
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open) fail(std::string("unexpected '") + c + "'", p);
      brackets.pop_back();
    }
    emit(Token::Type::kOp, std::string(1, c), p);
    return p + 1;
  }

  size_t lex_number(size_t p, bool after_dot) {
    size_t end = p;
    auto digits = [&](size_t q) {
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() &&
                                                        is_digit(src_[q + 1])))) {
        ++q;
      }
      return q;
    };
    if (src_[p] == '0' && p + 1 < src_.size() && std::string_view("xXoObB").find(src_[p + 1]) !=
                                                     std::string_view::npos) {
      int base = (src_[p + 1] | 0x20) == 'x' ? 16 : (src_[p + 1] | 0x20) == 'o' ? 8 : 2;
      end = p + 2;
      std::string digits_only;
      while (end < src_.size() && (hex_value(src_[end]) >= 0 || src_[end] == '_')) {
        if (src_[end] != '_') digits_only += src_[end];
        ++end;
      }
      char* parse_end = nullptr;
      long long v = std::strtoll(digits_only.c_str(), &parse_end, base);
      if (digits_only.empty() || *parse_end != '\0') fail("invalid integer literal", p);
      emit(Token::Type::kInt, std::to_string(v), p);
      return end;
    }
    end = digits(p);
    bool is_float = false;
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] | 0x20) == 'e') {
      size_t q = end + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        end = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    emit(is_float ? Token::Type::kFloat : Token::Type::kInt, text, p);
    return end;
  }

  size_t lex_string(size_t p) {
    char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) fail("unterminated string literal", p);
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail("unterminated string literal", p);
      i = decode_escape(i, value);
    }
    emit(Token::Type::kString, std::move(value), p);
    return i + 1;
  }

  // Python's "unicode-escape" decoding of one escape starting at the backslash at `i`.
  size_t decode_escape(size_t i, std::string& out) {
    char e = src_[i + 1];
    switch (e) {
      case '\n': return i + 2;
      case '\\': out += '\\'; return i + 2;
      case '\'': out += '\''; return i + 2;
      case '"': out += '"'; return i + 2;
      case 'a': out += '\a'; return i + 2;
      case 'b': out += '\b'; return i + 2;
      case 'f': out += '\f'; return i + 2;
      case 'n': out += '\n'; return i + 2;
      case 'r': out += '\r'; return i + 2;
      case 't': out += '\t'; return i + 2;
      case 'v': out += '\v'; return i + 2;
      case 'x':
      case 'u':
      case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          int h = i + 2 + k < src_.size() ? hex_value(src_[i + 2 + k]) : -1;
          if (h < 0) fail(std::string("truncated \\") + e + " escape in string literal", i);
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10ffff) fail("illegal Unicode character in string literal", i);
        py::append_utf8(out, cp);
        return i + 2 + n;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = 0;
          size_t k = i + 1;
          while (k < i + 4 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7') {
            cp = cp * 8 + static_cast<char32_t>(src_[k] - '0');
            ++k;
          }
          py::append_utf8(out, cp);
          return k;
        }
        out += '\\';  // unknown escapes keep their backslash, as in Python
        return i + 1;
    }
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  size_t raw_body_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace deltaserve::jinja
