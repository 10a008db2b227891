// Template source -> tokens, with jinja2's whitespace rules as transformers configures them:
// trim_blocks (drop the first newline after a block or comment tag), lstrip_blocks (drop the
// spaces and tabs before a block or comment tag that starts a line), the {%- -%} {{- -}} {#- -#}
// and {%+ +%} modifiers, raw blocks, and keep_trailing_newline=False. Newlines are normalised
// to "\n" first, as jinja2 does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::jinja {

struct Token {
  enum class Type : uint8_t {
    kText,        // template data between tags (value = the text)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // string literal, escapes already decoded
    kInt,
    kFloat,
    kOp,          // operator or punctuation (value = its spelling)
    kEof,
  };
  Type type;
  std::string value;
  int line;
  int column;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws TemplateError (unclosed tag, comment or string, stray character) with a position.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace deltaserve::jinja
