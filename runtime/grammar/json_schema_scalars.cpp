// The keywords of JsonSchemaCompiler that bound strings and numbers: minLength, maxLength,
// format, pattern; minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf.
#include <algorithm>
#include <cmath>

#include "runtime/grammar/json_number_bounds.h"
#include "runtime/grammar/json_regex.h"
#include "runtime/grammar/json_schema_grammar.h"
#include "runtime/grammar/json_string_formats.h"

namespace deltaserve::runtime::grammar {
namespace {

// A numeric bound as an integer: exact for JSON integers, `round` (floor or ceil) applied to
// floats; anything beyond the integer primitive's range is clamped just past it.
int64_t rounded_bound(const SchemaJson& v, double (*round)(double)) {
  constexpr int64_t kBeyond = kMaxBoundMagnitude + 1;
  if (v.is_number_unsigned()) return v.get<uint64_t>() > static_cast<uint64_t>(kBeyond) ? kBeyond : v.get<int64_t>();
  if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -kBeyond, kBeyond);
  const double d = round(v.get<double>());
  if (d > static_cast<double>(kBeyond)) return kBeyond;
  if (d < -static_cast<double>(kBeyond)) return -kBeyond;
  return static_cast<int64_t>(d);
}

const SchemaJson* bound_keyword(const SchemaJson& schema, const char* key, const std::string& path) {
  const auto it = schema.find(key);
  if (it == schema.end()) return nullptr;
  if (!it->is_number())
    throw SchemaError(schema_path(path, key) + ": must be a number (the draft-4 boolean form is not supported)");
  return &*it;
}

double floor_of(double d) { return std::floor(d); }
double ceil_of(double d) { return std::ceil(d); }

// multipleOf as an integer k >= 1, nullopt when absent. Throws for a fractional k (naive validators divide in floating point and disagree on
// 0.07 / 0.01), for k past kMaxMultipleOf, and for k > 1 beside bounds (not combined here).
std::optional<int64_t> multiple_of(const SchemaJson& schema, const std::string& path) {
  const auto m = schema.find("multipleOf");
  if (m == schema.end()) return std::nullopt;
  const std::string at = schema_path(path, "multipleOf");
  if (!m->is_number() || m->get<double>() <= 0) throw SchemaError(at + ": must be a number above 0");
  const double k = m->get<double>();
  if (std::floor(k) != k)
    throw SchemaError(at + ": only integral values are supported (a fractional multipleOf is not)");
  if (k > static_cast<double>(kMaxMultipleOf))
    throw SchemaError(at + ": at most " + std::to_string(kMaxMultipleOf) + " is supported (the grammar grows with it)");
  for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (schema.contains(bound) && k != 1)
      throw SchemaError(at + ": cannot be combined with '" + bound + "' (only one of them is enforced)");
  }
  return static_cast<int64_t>(k);
}

}  // namespace

std::optional<int> count_keyword(const SchemaJson& schema, const char* key, int cap, const std::string& path) {
  const auto it = schema.find(key);
  if (it == schema.end()) return std::nullopt;
  const bool integral =
      it->is_number_integer() || (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>());
  if (!integral || it->get<double>() < 0)
    throw SchemaError(schema_path(path, key) + ": must be a non-negative integer");
  if (it->get<double>() > cap)
    throw SchemaError(schema_path(path, key) + ": at most " + std::to_string(cap) + " is supported (the grammar grows with it)");
  return static_cast<int>(it->get<double>());
}

uint32_t JsonSchemaCompiler::string_value(const SchemaJson& schema, const std::string& path, bool raw) {
  const std::optional<int> min_length = count_keyword(schema, "minLength", kMaxStringLengthBound, path);
  const std::optional<int> max_length = count_keyword(schema, "maxLength", kMaxStringLengthBound, path);
  uint32_t content = UINT32_MAX;
  // value() has refused an unknown format in strict mode; otherwise it is an annotation.
  const bool has_format = schema.contains("format") && !unknown_format(schema);
  if (const auto p = schema.find("pattern"); p != schema.end()) {
    if (!p->is_string()) throw SchemaError(schema_path(path, "pattern") + ": must be a string");
    if (has_format) throw SchemaError(schema_path(path, "pattern") + ": cannot be combined with format");
    if (max_length && *max_length < min_length.value_or(0))
      throw SchemaError(schema_path(path, "maxLength") + ": is below minLength");
    try {
      content = regex_rule(g_, parse_regex(p->get<std::string>()), raw, min_length.value_or(0), max_length.value_or(-1));
    } catch (const RegexError& e) {
      throw SchemaError(schema_path(path, "pattern") + ": " + e.what());
    }
  } else if (has_format) {
    const auto f = schema.find("format");
    if (!f->is_string()) throw SchemaError(schema_path(path, "format") + ": must be a string");
    if (min_length || max_length)
      throw SchemaError(schema_path(path, "format") + ": cannot be combined with minLength/maxLength");
    content = *string_format(g_, json_, f->get<std::string>());  // known: unknown_format() was false
  } else if (min_length || max_length) {
    const int lo = min_length.value_or(0);
    if (max_length && *max_length < lo) throw SchemaError(schema_path(path, "maxLength") + ": is below minLength");
    const uint32_t ch = raw ? json_.raw_char() : json_.string_char();
    content = g_.add_rule("string_of_length");
    g_.add_alternative(content, json_.repeat(Grammar::call(ch), lo, max_length.value_or(-1)));
  } else {
    return raw ? json_.raw_text() : json_.string();
  }
  if (raw) return content;
  const uint32_t r = g_.add_rule("bounded_string");
  Grammar::Sequence s = g_.literal("\"");
  s.push_back(Grammar::call(content));
  g_.append_literal(s, "\"");
  g_.add_alternative(r, s);
  return r;
}

uint32_t JsonSchemaCompiler::integer_value(const SchemaJson& schema, const std::string& path) {
  if (const std::optional<int64_t> k = multiple_of(schema, path); k && *k != 1) return integer_multiple_of(g_, *k);
  const SchemaJson* minimum = bound_keyword(schema, "minimum", path);
  const SchemaJson* maximum = bound_keyword(schema, "maximum", path);
  const SchemaJson* ex_minimum = bound_keyword(schema, "exclusiveMinimum", path);
  const SchemaJson* ex_maximum = bound_keyword(schema, "exclusiveMaximum", path);
  if (!minimum && !maximum && !ex_minimum && !ex_maximum) return json_.integer();
  int64_t lo = -kMaxBoundMagnitude, hi = kMaxBoundMagnitude;
  if (minimum) lo = std::max(lo, rounded_bound(*minimum, ceil_of));
  if (ex_minimum) lo = std::max(lo, rounded_bound(*ex_minimum, floor_of) + 1);
  if (maximum) hi = std::min(hi, rounded_bound(*maximum, floor_of));
  if (ex_maximum) hi = std::min(hi, rounded_bound(*ex_maximum, ceil_of) - 1);
  const std::optional<uint32_t> r = integer_in_range(g_, lo, hi);
  if (!r) throw SchemaError(path + ": no integer of at most 16 digits lies between the bounds");
  return *r;
}

uint32_t JsonSchemaCompiler::number_value(const SchemaJson& schema, const std::string& path) {
  // A multiple of an integer k is an integer: written as one, it is a valid number too (with
  // k = 1, the bounds hold as integer bounds).
  if (const std::optional<int64_t> k = multiple_of(schema, path)) {
    return *k == 1 ? integer_value(schema, path) : integer_multiple_of(g_, *k);
  }
  std::optional<NumberBound> lo, hi;
  // Stricter of two bounds on one side: the larger lower (or the exclusive one at a tie).
  auto take = [&](const char* key, bool lower, bool exclusive) {
    const SchemaJson* v = bound_keyword(schema, key, path);
    if (!v) return;
    const double d = v->get<double>();
    if (std::floor(d) != d || std::fabs(d) > static_cast<double>(kMaxBoundMagnitude))
      throw SchemaError(schema_path(path, key) + ": on a number only integral bounds of at most 16 digits are supported");
    const NumberBound b{rounded_bound(*v, floor_of), exclusive};
    std::optional<NumberBound>& side = lower ? lo : hi;
    const bool stricter = !side || (lower ? b.value > side->value : b.value < side->value) ||
                          (b.value == side->value && b.exclusive);
    if (stricter) side = b;
  };
  take("minimum", true, false);
  take("exclusiveMinimum", true, true);
  take("maximum", false, false);
  take("exclusiveMaximum", false, true);
  if (!lo && !hi) return json_.number();
  const std::optional<uint32_t> r = number_in_range(g_, lo, hi);
  if (!r) throw SchemaError(path + ": no number lies between the bounds");
  return *r;
}

}  // namespace deltaserve::runtime::grammar
