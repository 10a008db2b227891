#include "runtime/grammar/json_primitives.h"

#include <string>

namespace deltaserve::runtime::grammar {
namespace {

constexpr uint32_t kNone = UINT32_MAX;

ByteSet digits() { return ByteSet::range('0', '9'); }
ByteSet hex() {
  ByteSet s = ByteSet::range('0', '9');
  s.add_range('a', 'f');
  s.add_range('A', 'F');
  return s;
}

}  // namespace

Grammar::Sequence JsonPrimitives::repeat(Element element, int min, int max) {
  Grammar::Sequence seq(static_cast<size_t>(min), element);
  uint32_t opt = kNone;
  if (max < 0) {
    opt = g_.add_rule("repeat");  // opt := element opt | ε
    g_.add_alternative(opt, {element, Grammar::call(opt)});
    g_.add_alternative(opt, {});
  }
  // opt_k := element opt_{k-1} | ε, built from k = 1 up.
  for (int k = 1; k <= max - min; ++k) {
    const uint32_t r = g_.add_rule("repeat");
    Grammar::Sequence alt{element};
    if (opt != kNone) alt.push_back(Grammar::call(opt));
    g_.add_alternative(r, alt);
    g_.add_alternative(r, {});
    opt = r;
  }
  if (opt != kNone) seq.push_back(Grammar::call(opt));
  return seq;
}

uint32_t JsonPrimitives::literal(std::string_view text, std::string_view name) {
  const uint32_t r = g_.add_rule(std::string(name));
  g_.add_alternative(r, g_.literal(text));
  return r;
}

uint32_t JsonPrimitives::utf8_char(const ByteSet& ascii, std::string_view name) {
  const uint32_t r = g_.add_rule(std::string(name));
  const ByteSet cont = ByteSet::range(0x80, 0xBF);
  g_.add_alternative(r, {g_.bytes(ascii)});
  g_.add_alternative(r, {g_.bytes(ByteSet::range(0xC2, 0xDF)), g_.bytes(cont)});
  g_.add_alternative(r, {g_.bytes(ByteSet::of("\xE0")), g_.bytes(ByteSet::range(0xA0, 0xBF)), g_.bytes(cont)});
  ByteSet e1 = ByteSet::range(0xE1, 0xEC);
  e1.add_range(0xEE, 0xEF);
  g_.add_alternative(r, {g_.bytes(e1), g_.bytes(cont), g_.bytes(cont)});
  g_.add_alternative(r, {g_.bytes(ByteSet::of("\xED")), g_.bytes(ByteSet::range(0x80, 0x9F)), g_.bytes(cont)});
  g_.add_alternative(r, {g_.bytes(ByteSet::of("\xF0")), g_.bytes(ByteSet::range(0x90, 0xBF)), g_.bytes(cont),
                         g_.bytes(cont)});
  g_.add_alternative(r, {g_.bytes(ByteSet::range(0xF1, 0xF3)), g_.bytes(cont), g_.bytes(cont), g_.bytes(cont)});
  g_.add_alternative(r, {g_.bytes(ByteSet::of("\xF4")), g_.bytes(ByteSet::range(0x80, 0x8F)), g_.bytes(cont),
                         g_.bytes(cont)});
  return r;
}

uint32_t JsonPrimitives::string_char() {
  if (string_char_ != kNone) return string_char_;
  ByteSet plain = ByteSet::range(0x20, 0x7F);
  ByteSet quote_or_backslash = ByteSet::of("\"\\");
  for (int i = 0; i < 4; ++i) plain.bits[i] &= ~quote_or_backslash.bits[i];
  const uint32_t ch = utf8_char(plain, "json_char");
  // Escapes: \" \\ \/ \b \f \n \r \t and \uXXXX outside the surrogates D800-DFFF.
  g_.add_alternative(ch, {g_.bytes(ByteSet::of("\\")), g_.bytes(ByteSet::of("\"\\/bfnrt"))});
  ByteSet not_d;
  for (const char c : std::string_view("0123456789abceABCE")) not_d.add(static_cast<uint8_t>(c));
  const ByteSet h = hex();
  g_.add_alternative(ch, {g_.bytes(ByteSet::of("\\")), g_.bytes(ByteSet::of("u")), g_.bytes(not_d), g_.bytes(h),
                          g_.bytes(h), g_.bytes(h)});
  g_.add_alternative(ch, {g_.bytes(ByteSet::of("\\")), g_.bytes(ByteSet::of("u")), g_.bytes(ByteSet::of("dD")),
                          g_.bytes(ByteSet::range('0', '7')), g_.bytes(h), g_.bytes(h)});
  string_char_ = ch;
  return ch;
}

uint32_t JsonPrimitives::string() {
  if (string_ != kNone) return string_;
  const uint32_t ch = string_char();
  const uint32_t chars = g_.add_rule("json_chars");  // chars := char chars | ε
  g_.add_alternative(chars, {Grammar::call(ch), Grammar::call(chars)});
  g_.add_alternative(chars, {});
  string_ = g_.add_rule("json_string");
  Grammar::Sequence s = g_.literal("\"");
  s.push_back(Grammar::call(chars));
  g_.append_literal(s, "\"");
  g_.add_alternative(string_, s);
  return string_;
}

uint32_t JsonPrimitives::digits_upto(int max) {
  const Grammar::Sequence seq = repeat(digits(), 0, max);
  const uint32_t r = g_.add_rule("digits");
  g_.add_alternative(r, seq);
  return r;
}

uint32_t JsonPrimitives::integer() {
  if (integer_ != kNone) return integer_;
  const uint32_t magnitude = g_.add_rule("json_magnitude");
  g_.add_alternative(magnitude, g_.literal("0"));
  g_.add_alternative(magnitude, {g_.bytes(ByteSet::range('1', '9')), Grammar::call(digits_upto(15))});
  integer_ = g_.add_rule("json_integer");
  g_.add_alternative(integer_, {Grammar::call(magnitude)});
  g_.add_alternative(integer_, {g_.bytes(ByteSet::of("-")), Grammar::call(magnitude)});
  return integer_;
}

uint32_t JsonPrimitives::number() {
  if (number_ != kNone) return number_;
  const uint32_t frac = g_.add_rule("json_fraction");  // ('.' [0-9]{1,15})?
  Grammar::Sequence f = g_.literal(".");
  for (const Element& e : repeat(digits(), 1, 15)) f.push_back(e);
  g_.add_alternative(frac, f);
  g_.add_alternative(frac, {});
  const uint32_t exp = g_.add_rule("json_exponent");  // ([eE][+-]?[0-9]{1,2})?
  Grammar::Sequence e{g_.bytes(ByteSet::of("eE"))};
  const uint32_t sign = g_.add_rule("exponent_sign");
  g_.add_alternative(sign, {g_.bytes(ByteSet::of("+-"))});
  g_.add_alternative(sign, {});
  e.push_back(Grammar::call(sign));
  for (const Element& d : repeat(digits(), 1, 2)) e.push_back(d);
  g_.add_alternative(exp, e);
  g_.add_alternative(exp, {});
  number_ = g_.add_rule("json_number");
  g_.add_alternative(number_, {Grammar::call(integer()), Grammar::call(frac), Grammar::call(exp)});
  return number_;
}

uint32_t JsonPrimitives::boolean() {
  if (boolean_ != kNone) return boolean_;
  boolean_ = g_.add_rule("json_boolean");
  g_.add_alternative(boolean_, g_.literal("true"));
  g_.add_alternative(boolean_, g_.literal("false"));
  return boolean_;
}

uint32_t JsonPrimitives::null() {
  if (null_ == kNone) null_ = literal("null", "json_null");
  return null_;
}

uint32_t JsonPrimitives::optional_space() {
  if (space_ != kNone) return space_;
  space_ = g_.add_rule("optional_space");
  g_.add_alternative(space_, g_.literal(" "));
  g_.add_alternative(space_, {});
  return space_;
}

uint32_t JsonPrimitives::any_value() {
  if (any_ != kNone) return any_;
  any_ = g_.add_rule("json_value");
  const uint32_t array = g_.add_rule("json_array");
  const uint32_t more_items = g_.add_rule("json_array_more");  // (',' sp value)*
  g_.add_alternative(more_items, {g_.bytes(ByteSet::of(",")), Grammar::call(optional_space()), Grammar::call(any_),
                                  Grammar::call(more_items)});
  g_.add_alternative(more_items, {});
  g_.add_alternative(array, g_.literal("[]"));
  g_.add_alternative(array, {g_.bytes(ByteSet::of("[")), Grammar::call(any_), Grammar::call(more_items),
                             g_.bytes(ByteSet::of("]"))});
  for (const uint32_t r : {any_object(), array, string(), number(), boolean(), null()}) {
    g_.add_alternative(any_, {Grammar::call(r)});
  }
  return any_;
}

uint32_t JsonPrimitives::any_object() {
  if (object_ != kNone) return object_;
  object_ = g_.add_rule("json_object");
  const uint32_t value = any_value();
  const uint32_t pair = g_.add_rule("json_member");
  g_.add_alternative(pair, {Grammar::call(string()), g_.bytes(ByteSet::of(":")), Grammar::call(optional_space()),
                            Grammar::call(value)});
  const uint32_t more = g_.add_rule("json_members_more");
  g_.add_alternative(more, {g_.bytes(ByteSet::of(",")), Grammar::call(optional_space()), Grammar::call(pair),
                            Grammar::call(more)});
  g_.add_alternative(more, {});
  g_.add_alternative(object_, g_.literal("{}"));
  g_.add_alternative(object_, {g_.bytes(ByteSet::of("{")), Grammar::call(pair), Grammar::call(more),
                               g_.bytes(ByteSet::of("}"))});
  return object_;
}

uint32_t JsonPrimitives::raw_char() {
  if (raw_char_ != kNone) return raw_char_;
  ByteSet ascii = ByteSet::range(0x00, 0x7F);
  ascii.bits[0] &= ~ByteSet::of("<").bits[0];
  raw_char_ = utf8_char(ascii, "raw_char");
  return raw_char_;
}

uint32_t JsonPrimitives::raw_text() {
  if (raw_ != kNone) return raw_;
  const uint32_t ch = raw_char();
  raw_ = g_.add_rule("raw_text");
  g_.add_alternative(raw_, {Grammar::call(ch), Grammar::call(raw_)});
  g_.add_alternative(raw_, {});
  return raw_;
}

}  // namespace deltaserve::runtime::grammar
