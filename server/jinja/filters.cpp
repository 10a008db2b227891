// jinja2's builtin filters on strings and numbers (filters.py), transformers' tojson override,
// and the filter registry. Sequence filters live in sequence_filters.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "server/jinja/builtins.h"
#include "server/jinja/call_args.h"
#include "server/jinja/filter_impl.h"
#include "server/jinja/interpreter.h"
#include "server/jinja/py_string.h"
#include "server/jinja/python_json.h"
#include "server/jinja/string_format.h"

namespace deltaserve::jinja {
namespace filter_impl {
namespace {

// Python float(str): surrounding whitespace, underscores between digits, inf/nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py::strip(text, std::nullopt, py::StripSide::kBoth);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && isdigit(s[i - 1]) && isdigit(s[i + 1])) continue;
    cleaned += s[i];
  }
  if (cleaned.empty()) return std::nullopt;
  std::string lower = py::lower(cleaned);
  std::string body = lower[0] == '+' || lower[0] == '-' ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double d = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -d : d;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos || body.find("0x") == 0) {
    return std::nullopt;
  }
  char* end = nullptr;
  double d = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = py::strip(text, std::nullopt, py::StripSide::kBoth);
  bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.erase(0, 1);
  std::string lower = py::lower(s);
  if ((base == 16 && lower.rfind("0x", 0) == 0) || (base == 8 && lower.rfind("0o", 0) == 0) ||
      (base == 2 && lower.rfind("0b", 0) == 0)) {
    s.erase(0, 2);
  }
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size()) continue;
    digits += s[i];
  }
  if (digits.empty() || base < 2 || base > 36) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (end != digits.c_str() + digits.size() || errno == ERANGE || !isalnum(digits[0])) {
    return std::nullopt;
  }
  return negative ? -v : v;
}



}  // namespace

// jinja2's make_attrgetter: "a.b.0" walks getitem for each part.
Value get_path(Interpreter& interp, Value item, const Value& attribute) {
  if (attribute.is_int()) return interp.getitem(item, attribute);
  for (const std::string& part : py::split(expect_str(attribute, "attribute"), std::string("."), -1)) {
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    item = interp.getitem(item, numeric ? Value::integer(std::atoll(part.c_str())) : Value::string(part));
  }
  return item;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py::lower(v.str())) : v; }

Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(v.to_str()); }

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs(std::string("abs"), args, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.int_value() == INT64_MIN) throw TemplateError("integer overflow");
    return Value::integer(std::llabs(v.int_value()));
  }
  throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interpreter& interp, const Value& v, CallArgs& args) {
  // jinja2's attr filter looks up attributes only, never items: {'k': 1}|attr('k') is undefined.
  BoundArgs a("attr", args, {"name"});
  const std::string& name = expect_str(a.get(0, Value::string("")), "attr name");
  if (v.is_undefined()) return v;
  if (v.is_namespace()) return interp.getattr(v, name);
  if (auto method = builtin_method(v, name)) return *method;
  return Value::undefined("'" + v.type_name() + " object' has no attribute '" + name + "'");
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("capitalize", args, {});
  return Value::string(py::capitalize(v.to_str()));
}

Value f_center(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("center", args, {"width"});
  std::string s = v.to_str();
  int64_t width = expect_int(a.get(0, Value::integer(80)), "width");
  int64_t len = static_cast<int64_t>(py::length(s));
  if (width <= len) return Value::string(s);
  interp.check_size(static_cast<size_t>(width));
  // CPython's str.center: the odd extra space goes left when the string length is odd.
  int64_t pad = width - len;
  int64_t left = pad / 2 + (pad & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (a.get(1, Value::boolean(false)).truthy() && !v.truthy())) {
    return a.get(0, Value::string(""));
  }
  return v;
}

Value f_escape(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("escape", args, {});
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("float", args, {"default"});
  if (v.is_undefined()) throw TemplateError(v.undefined_hint());
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.str())) return Value::number(*d);
  }
  return a.get(0, Value::number(0.0));
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("int", args, {"default", "base"});
  if (v.is_undefined()) throw TemplateError(v.undefined_hint());
  if (v.is_int() || v.is_bool()) return Value::integer(v.int_value());
  if (v.is_float() && std::isfinite(v.as_double()) && std::fabs(v.as_double()) < 9.2e18) {
    return Value::integer(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    int base = static_cast<int>(expect_int(a.get(1, Value::integer(10)), "base"));
    if (auto i = parse_int(v.str(), base)) return Value::integer(*i);
    auto d = parse_float(v.str());
    if (d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value::integer(static_cast<int64_t>(*d));
  }
  return a.get(0, Value::integer(0));
}

Value f_format(Interpreter& interp, const Value& v, CallArgs& args) {
  Value fmt = soft_str(v);
  Value operand;
  if (!args.keyword.empty()) {
    if (!args.positional.empty()) {
      throw TemplateError("can't handle positional and keyword arguments at the same time");
    }
    Dict kwargs;
    for (auto& [key, value] : args.keyword) kwargs.set(key, value);
    operand = Value::dict(std::move(kwargs));
  } else {
    operand = Value::list(args.positional, true);
  }
  std::string out = percent_format(fmt.str(), operand);
  interp.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_indent(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("indent", args, {"width", "first", "blank"});
  if (v.is_undefined()) throw TemplateError(v.undefined_hint());
  if (!v.is_string()) {
    throw TemplateError("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  }
  Value width = a.get(0, Value::integer(4));
  std::string indention = width.is_string()
                              ? width.str()
                              : std::string(static_cast<size_t>(std::max<int64_t>(0, expect_int(width, "width"))), ' ');
  bool first = a.get(1, Value::boolean(false)).truthy();
  bool blank = a.get(2, Value::boolean(false)).truthy();
  std::vector<std::string> lines = py::splitlines(v.to_str() + "\n", false);
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      rv += "\n";
      if (blank || !lines[i].empty()) rv += indention;
    }
    rv += lines[i];
  }
  if (first) rv = indention + rv;
  interp.check_size(rv.size());
  return Value::string(std::move(rv));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("lower", args, {});
  return Value::string(py::lower(v.to_str()));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("upper", args, {});
  return Value::string(py::upper(v.to_str()));
}

Value f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("replace", args, {"old", "new", "count"});
  if (!a.has(0) || !a.has(1)) throw TemplateError("replace() needs old and new");
  int64_t count = a.given(2) ? expect_int(a.at(2), "count") : -1;
  std::string out = py::replace(v.to_str(), a.at(0).to_str(), a.at(1).to_str(), count);
  interp.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("round", args, {"precision", "method"});
  int64_t precision = expect_int(a.get(0, Value::integer(0)), "precision");
  std::string method = a.given(1) ? expect_str(a.at(1), "method") : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    throw TemplateError("method must be common, ceil or floor");
  }
  if (!v.is_number()) throw TemplateError("round() needs a number, got '" + v.type_name() + "'");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.int_value());  // round(int, n) stays an int
    double d = v.as_double();
    if (!std::isfinite(d)) return v;
    // Correctly rounded, ties to even on the exact binary value: what CPython's round() does.
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), d);
    double r = std::strtod(buf, nullptr);
    if (precision < 0) {
      double scale = std::pow(10.0, static_cast<double>(-precision));
      r = std::nearbyint(d / scale) * scale;
    }
    return Value::number(r);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("safe", args, {});
  return soft_str(v);
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("string", args, {});
  return soft_str(v);
}

Value f_title(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("title", args, {});
  // jinja2's do_title: split on runs of [-\s({\[<] and capitalise each piece.
  std::u32string s = py::decode(v.to_str());
  auto is_delim = [](char32_t c) {
    return py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    bool delim = is_delim(s[i]);
    while (j < s.size() && is_delim(s[j]) == delim) ++j;
    out += py::upper(py::encode(s.substr(i, 1))) + py::lower(py::encode(s.substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value::string(std::move(out));
}

Value f_tojson(Interpreter& interp, const Value& v, CallArgs& args) {
  // transformers' override: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False) -> json.dumps(...). Note the positional order differs from jinja2's.
  BoundArgs a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = a.get(0, Value::boolean(false)).truthy();
  if (a.given(1)) {
    const Value& indent = a.at(1);
    options.indent = indent.is_string()
                         ? indent.str()
                         : std::string(static_cast<size_t>(std::clamp<int64_t>(expect_int(indent, "indent"), 0, 1024)), ' ');
  }
  if (a.given(2)) {
    const Value& seps = a.at(2);
    if (!seps.is_list() || seps.list().items.size() != 2) {
      throw TemplateError("tojson separators must be a pair (item_separator, key_separator)");
    }
    options.item_separator = expect_str(seps.list().items[0], "item separator");
    options.key_separator = expect_str(seps.list().items[1], "key separator");
  }
  options.sort_keys = a.get(3, Value::boolean(false)).truthy();
  std::string out = python_json_dumps(v, options);
  interp.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (a.given(0)) chars = a.at(0).to_str();
  return Value::string(py::strip(v.to_str(), chars, py::StripSide::kBoth));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("truncate", args, {"length", "killwords", "end", "leeway"});
  int64_t length = expect_int(a.get(0, Value::integer(255)), "length");
  int64_t leeway = a.given(3) ? expect_int(a.at(3), "leeway") : 5;
  // Non-strings short enough are returned as they are (len(Undefined) == 0), like jinja2.
  if (v.is_undefined()) return v;
  if ((v.is_list() && static_cast<int64_t>(v.list().items.size()) <= length + leeway) ||
      (v.is_dict() && static_cast<int64_t>(v.dict().items.size()) <= length + leeway)) {
    return v;
  }
  if (!v.is_string()) throw TemplateError("object of type '" + v.type_name() + "' has no len()");
  std::string s = v.str();
  bool killwords = a.get(1, Value::boolean(false)).truthy();
  std::string end = a.given(2) ? a.at(2).to_str() : "...";
  int64_t end_len = static_cast<int64_t>(py::length(end));
  if (length < end_len) throw TemplateError("expected length >= " + std::to_string(end_len));
  if (static_cast<int64_t>(py::length(s)) <= length + leeway) return Value::string(s);
  std::string head = py::slice(s, std::nullopt, length - end_len, std::nullopt);
  if (killwords) return Value::string(head + end);
  return Value::string(py::rsplit(head, std::string(" "), 1).front() + end);
}

// A hashable identity for unique(): Python treats 1, 1.0 and True as the same key.

Value f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("wordcount", args, {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : py::decode(v.to_str())) {
    bool word_char = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                     (c >= 'A' && c <= 'Z') || (c >= 0x80 && !py::is_space(c));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

}  // namespace filter_impl

namespace {

using namespace filter_impl;
using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> kTable = {
      {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
      {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
      {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent},
      {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
      {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max},
      {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
      {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
      {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  return kTable;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filter_table().count(name) > 0; }

Value apply_filter(Interpreter& interp, const std::string& name, const Value& input,
                   CallArgs& args) {
  auto it = filter_table().find(name);
  if (it == filter_table().end()) throw TemplateError("no filter named '" + name + "'");
  return it->second(interp, input, args);
}

}  // namespace deltaserve::jinja
