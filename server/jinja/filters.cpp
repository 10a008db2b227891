// jinja2's builtin filters (filters.py), plus transformers' tojson override.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "server/jinja/builtins.h"
#include "server/jinja/call_args.h"
#include "server/jinja/interpreter.h"
#include "server/jinja/py_string.h"
#include "server/jinja/python_json.h"
#include "server/jinja/string_format.h"

namespace deltaserve::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

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

Value f_batch(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("batch", args, {"linecount", "fill_with"});
  int64_t n = expect_int(a.get(0, Value::integer(1)), "linecount");
  if (n <= 0) throw TemplateError("batch() linecount must be positive");
  std::vector<Value> out, row;
  for (Value& item : interp.iterate(v)) {
    row.push_back(std::move(item));
    if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::list(std::exchange(row, {})));
  }
  if (!row.empty()) {
    if (a.given(1)) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(a.at(1));
    }
    out.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(out));
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

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("length", args, {});
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value::integer(0);
    case Value::Kind::kString: return Value::integer(static_cast<int64_t>(py::length(v.str())));
    case Value::Kind::kList: return Value::integer(static_cast<int64_t>(v.list().items.size()));
    case Value::Kind::kDict: return Value::integer(static_cast<int64_t>(v.dict().items.size()));
    default: throw TemplateError("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (a.get(1, Value::boolean(false)).truthy() && !v.truthy())) {
    return a.get(0, Value::string(""));
  }
  return v;
}

std::vector<Value> sorted(Interpreter& interp, std::vector<Value> items, bool reverse,
                          bool case_sensitive, const std::function<Value(const Value&)>& key) {
  interp.tick(items.size());
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value k = key(item);
    keyed.emplace_back(case_sensitive ? k : ignore_case(k), std::move(item));
  }
  // Python's sort is stable and reverse=True keeps equal elements in their original order.
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? value_less(b.first, a.first) : value_less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return out;
}

Value f_dictsort(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw TemplateError("dictsort expects a mapping, got '" + v.type_name() + "'");
  std::string by = a.given(1) ? expect_str(a.at(1), "by") : "key";
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.dict().items) {
    pairs.push_back(Value::list({Value::string(key), value}, true));
  }
  size_t pos = by == "key" ? 0 : 1;
  return Value::list(sorted(interp, std::move(pairs), a.get(2, Value::boolean(false)).truthy(),
                            a.get(0, Value::boolean(false)).truthy(),
                            [pos](const Value& p) { return p.list().items[pos]; }));
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

Value f_first(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("first", args, {});
  if (v.is_list()) {
    if (v.list().items.empty()) return Value::undefined("No first item, sequence was empty.");
    return v.list().items.front();
  }
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("last", args, {});
  if (v.is_undefined()) throw TemplateError(v.undefined_hint());
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

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

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("float", args, {"default"});
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.str())) return Value::number(*d);
  }
  return a.get(0, Value::number(0.0));
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("int", args, {"default", "base"});
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

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("items", args, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.dict().items) {
    pairs.push_back(Value::list({Value::string(key), value}, true));
  }
  return Value::list(std::move(pairs));
}

Value f_join(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("join", args, {"d", "attribute"});
  std::string sep = a.get(0, Value::string("")).to_str();
  std::string out;
  bool first = true;
  for (const Value& item : interp.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (a.given(1) ? get_path(interp, item, a.at(1)) : item).to_str();
    interp.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_list(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("list", args, {});
  return Value::list(interp.iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("lower", args, {});
  return Value::string(py::lower(v.to_str()));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("upper", args, {});
  return Value::string(py::upper(v.to_str()));
}

Value f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    BoundArgs a("map", args, {"attribute", "default"}, 0);
    if (!a.has(0)) throw TemplateError("map() needs a filter name or attribute=");
    for (const Value& item : interp.iterate(v)) {
      Value got = get_path(interp, item, a.at(0));
      if (a.given(1) && got.is_undefined()) got = a.at(1);
      out.push_back(std::move(got));
    }
    return Value::list(std::move(out));
  }
  std::string name = expect_str(args.positional[0], "map() filter name");
  if (!is_known_filter(name)) throw TemplateError("no filter named '" + name + "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : interp.iterate(v)) {
    CallArgs call = rest;
    out.push_back(apply_filter(interp, name, item, call));
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  BoundArgs a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  bool case_sensitive = a.get(0, Value::boolean(false)).truthy();
  auto key = [&](const Value& item) {
    Value k = a.given(1) ? get_path(interp, item, a.at(1)) : item;
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? value_less(best_key, k) : value_less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_max(Interpreter& interp, const Value& v, CallArgs& args) { return min_max(interp, v, args, true); }
Value f_min(Interpreter& interp, const Value& v, CallArgs& args) { return min_max(interp, v, args, false); }

Value select_or_reject(Interpreter& interp, const Value& v, CallArgs& args, bool by_attr,
                       bool select) {
  size_t first_test_arg = by_attr ? 1 : 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) throw TemplateError("selectattr/rejectattr need an attribute");
    attribute = args.positional[0];
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > first_test_arg) {
    test = expect_str(args.positional[first_test_arg], "test name");
    if (!is_known_test(*test)) throw TemplateError("no test named '" + *test + "'");
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first_test_arg) + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const Value& item : interp.iterate(v)) {
    interp.tick();
    Value subject = by_attr ? get_path(interp, item, attribute) : item;
    bool passed;
    if (test) {
      CallArgs call = test_args;
      passed = apply_test(interp, *test, subject, call);
    } else {
      passed = subject.truthy();
    }
    if (passed == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, true); }
Value f_reject(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, false); }
Value f_selectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, true); }
Value f_rejectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, false); }

Value f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("replace", args, {"old", "new", "count"});
  if (!a.has(0) || !a.has(1)) throw TemplateError("replace() needs old and new");
  int64_t count = a.given(2) ? expect_int(a.at(2), "count") : -1;
  std::string out = py::replace(v.to_str(), a.at(0).to_str(), a.at(1).to_str(), count);
  interp.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_reverse(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("reverse", args, {});
  if (v.is_string()) return Value::string(py::slice(v.str(), std::nullopt, std::nullopt, -1));
  std::vector<Value> items = interp.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
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

Value f_sort(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("sort", args, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> attrs;
  if (a.given(2)) {
    if (a.at(2).is_string()) {
      for (const std::string& part : py::split(a.at(2).str(), std::string(","), -1)) {
        attrs.push_back(Value::string(py::strip(part, std::nullopt, py::StripSide::kBoth)));
      }
    } else {
      attrs.push_back(a.at(2));
    }
  }
  auto key = [&](const Value& item) {
    if (attrs.empty()) return item;
    if (attrs.size() == 1) return get_path(interp, item, attrs[0]);
    std::vector<Value> parts;
    for (const Value& attr : attrs) parts.push_back(get_path(interp, item, attr));
    return Value::list(std::move(parts));
  };
  bool case_sensitive = a.get(1, Value::boolean(false)).truthy();
  auto key_ci = [&](const Value& item) {
    Value k = key(item);
    if (case_sensitive || !k.is_list()) return k;
    std::vector<Value> lowered;
    for (const Value& part : k.list().items) lowered.push_back(ignore_case(part));
    return Value::list(std::move(lowered));
  };
  return Value::list(sorted(interp, interp.iterate(v), a.get(0, Value::boolean(false)).truthy(),
                            case_sensitive, key_ci));
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("string", args, {});
  return soft_str(v);
}

Value f_sum(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("sum", args, {"attribute", "start"});
  Value total = a.get(1, Value::integer(0));
  for (const Value& item : interp.iterate(v)) {
    Value x = a.given(0) ? get_path(interp, item, a.at(0)) : item;
    if (!x.is_number() || !total.is_number()) {
      throw TemplateError("unsupported operand type(s) for +: '" + total.type_name() + "' and '" +
                          x.type_name() + "'");
    }
    if (total.is_float() || x.is_float()) {
      total = Value::number(total.as_double() + x.as_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.int_value(), x.int_value(), &r)) throw TemplateError("integer overflow");
      total = Value::integer(r);
    }
  }
  return total;
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
    std::string piece = py::encode(s.substr(i, j - i));
    out += py::upper(piece.substr(0, 1)) + py::lower(piece.substr(1));
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
  std::string s = v.to_str();
  int64_t length = expect_int(a.get(0, Value::integer(255)), "length");
  bool killwords = a.get(1, Value::boolean(false)).truthy();
  std::string end = a.given(2) ? a.at(2).to_str() : "...";
  int64_t leeway = a.given(3) ? expect_int(a.at(3), "leeway") : 5;
  int64_t end_len = static_cast<int64_t>(py::length(end));
  if (length < end_len) throw TemplateError("expected length >= " + std::to_string(end_len));
  if (static_cast<int64_t>(py::length(s)) <= length + leeway) return Value::string(s);
  std::string head = py::slice(s, std::nullopt, length - end_len, std::nullopt);
  if (killwords) return Value::string(head + end);
  return Value::string(py::rsplit(head, std::string(" "), 1).front() + end);
}

// A hashable identity for unique(): Python treats 1, 1.0 and True as the same key.
std::string unique_key(const Value& v) {
  if (v.is_number() && std::floor(v.as_double()) == v.as_double() && std::fabs(v.as_double()) < 9e15) {
    return "n" + std::to_string(static_cast<int64_t>(v.as_double()));
  }
  return v.type_name() + ":" + v.repr();
}

Value f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a.get(0, Value::boolean(false)).truthy();
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : interp.iterate(v)) {
    interp.tick();
    Value key = a.given(1) ? get_path(interp, item, a.at(1)) : item;
    if (!case_sensitive) key = ignore_case(key);
    if (seen.insert(unique_key(key)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

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
