// The JSON building blocks of constraint grammars (grammar.h), each added to a grammar once
// and reused by index. The JSON they produce is compact: no whitespace except one optional
// space after ':' and ','. Strings are well-formed UTF-8 (multi-byte characters checked byte
// by byte, so a token may end inside one), with JSON's escapes; \u escapes of UTF-16
// surrogates are refused (strict parsers reject lone ones). Numbers are bounded so every
// parser reads them exactly and a sampled sequence ends: at most 16 integer digits, 15
// fraction digits and 2 exponent digits.
//
// Single thread while building (the grammar is not yet shared).
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/grammar/grammar.h"

namespace deltaserve::runtime::grammar {

class JsonPrimitives {
 public:
  explicit JsonPrimitives(Grammar& g) : g_(g) {}

  uint32_t string();        // "..."
  uint32_t number();        // -?(0|[1-9][0-9]{0,15})(.[0-9]{1,15})?([eE][+-]?[0-9]{1,2})?
  uint32_t integer();       // -?(0|[1-9][0-9]{0,15})
  uint32_t boolean();       // true | false
  uint32_t null();          // null
  uint32_t optional_space();  // ' ' | ε
  uint32_t any_value();     // any JSON value (objects and arrays nest freely)
  uint32_t any_object();    // any JSON object
  // Raw text of any length with no '<' (a Qwen XML parameter value), well-formed UTF-8.
  uint32_t raw_text();
  // One character of a JSON string's content: a UTF-8 character or one escape (one code
  // point either way, as JSON Schema's minLength counts).
  uint32_t string_char();
  // One character of raw_text().
  uint32_t raw_char();
  // One rule matching exactly `text`.
  uint32_t literal(std::string_view text, std::string_view name);
  // `element` between min and max times (min <= max; max < 0: no upper bound).
  Grammar::Sequence repeat(Element element, int min, int max);
  Grammar::Sequence repeat(const ByteSet& set, int min, int max) { return repeat(g_.bytes(set), min, max); }

 private:
  // One UTF-8 character: an ASCII byte of `ascii` or a well-formed multi-byte sequence.
  uint32_t utf8_char(const ByteSet& ascii, std::string_view name);
  uint32_t digits_upto(int max);  // [0-9]{0,max}

  Grammar& g_;
  uint32_t string_ = UINT32_MAX, number_ = UINT32_MAX, integer_ = UINT32_MAX, boolean_ = UINT32_MAX;
  uint32_t null_ = UINT32_MAX, space_ = UINT32_MAX, any_ = UINT32_MAX, object_ = UINT32_MAX;
  uint32_t raw_ = UINT32_MAX, string_char_ = UINT32_MAX, raw_char_ = UINT32_MAX;
};

}  // namespace deltaserve::runtime::grammar
