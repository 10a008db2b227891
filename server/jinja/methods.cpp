// Methods of str/dict/list reachable from templates: 'a,b'.split(','), d.items(), d.get(k).
#include <unordered_map>
#include <unordered_set>

#include "server/jinja/builtins.h"
#include "server/jinja/call_args.h"
#include "server/jinja/interpreter.h"
#include "server/jinja/py_string.h"
#include "server/jinja/string_format.h"

namespace deltaserve::jinja {
namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs&);

std::optional<std::string> opt_str(const BoundArgs& a, size_t i, const char* what) {
  if (!a.given(i)) return std::nullopt;
  return expect_str(a.at(i), what);
}

Value strings(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

// startswith/endswith take a string or a tuple of strings, plus optional start/end.
Value affix_test(const Value& self, CallArgs& args, bool prefix) {
  BoundArgs a(prefix ? "startswith" : "endswith", args, {"affix", "start", "end"}, 3);
  if (!a.has(0)) throw TemplateError("startswith/endswith need an argument");
  std::string s = self.str();
  if (a.given(1) || a.given(2)) {
    s = py::slice(s, a.given(1) ? std::optional<int64_t>(expect_int(a.at(1), "start")) : std::nullopt,
                  a.given(2) ? std::optional<int64_t>(expect_int(a.at(2), "end")) : std::nullopt,
                  std::nullopt);
  }
  std::vector<Value> candidates = a.at(0).is_list() ? a.at(0).list().items : std::vector<Value>{a.at(0)};
  for (const Value& c : candidates) {
    const std::string& x = expect_str(c, "startswith/endswith argument");
    bool hit = x.size() <= s.size() &&
               (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
    if (hit) return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value m_startswith(Interpreter&, const Value& s, CallArgs& args) { return affix_test(s, args, true); }
Value m_endswith(Interpreter&, const Value& s, CallArgs& args) { return affix_test(s, args, false); }

Value split_impl(const Value& s, CallArgs& args, bool right) {
  BoundArgs a(right ? "rsplit" : "split", args, {"sep", "maxsplit"});
  int64_t maxsplit = a.given(1) ? expect_int(a.at(1), "maxsplit") : -1;
  auto sep = opt_str(a, 0, "separator");
  return strings(right ? py::rsplit(s.str(), sep, maxsplit) : py::split(s.str(), sep, maxsplit));
}
Value m_split(Interpreter&, const Value& s, CallArgs& args) { return split_impl(s, args, false); }
Value m_rsplit(Interpreter&, const Value& s, CallArgs& args) { return split_impl(s, args, true); }

Value strip_impl(const Value& s, CallArgs& args, py::StripSide side) {
  BoundArgs a("strip", args, {"chars"});
  return Value::string(py::strip(s.str(), opt_str(a, 0, "strip chars"), side));
}
Value m_strip(Interpreter&, const Value& s, CallArgs& a) { return strip_impl(s, a, py::StripSide::kBoth); }
Value m_lstrip(Interpreter&, const Value& s, CallArgs& a) { return strip_impl(s, a, py::StripSide::kLeft); }
Value m_rstrip(Interpreter&, const Value& s, CallArgs& a) { return strip_impl(s, a, py::StripSide::kRight); }

Value m_replace(Interpreter& interp, const Value& s, CallArgs& args) {
  BoundArgs a("replace", args, {"old", "new", "count"});
  if (!a.has(0) || !a.has(1)) throw TemplateError("replace() takes at least 2 arguments");
  int64_t count = a.has(2) ? expect_int(a.at(2), "count") : -1;
  std::string out = py::replace(s.str(), expect_str(a.at(0), "old"), expect_str(a.at(1), "new"), count);
  interp.check_size(out.size());
  return Value::string(std::move(out));
}

#define CASE_METHOD(fn, impl)                                   \
  Value fn(Interpreter&, const Value& s, CallArgs& args) {      \
    BoundArgs(#fn, args, {});                                   \
    return Value::string(impl(s.str()));                        \
  }
CASE_METHOD(m_upper, py::upper)
CASE_METHOD(m_lower, py::lower)
CASE_METHOD(m_title, py::title)
CASE_METHOD(m_capitalize, py::capitalize)

Value m_format(Interpreter& interp, const Value& s, CallArgs& args) {
  return Value::string(brace_format(interp, s.str(), args));
}

Value m_join(Interpreter& interp, const Value& s, CallArgs& args) {
  BoundArgs a("join", args, {"iterable"});
  std::string out;
  bool first = true;
  for (const Value& item : interp.iterate(a.get(0, Value::list({})))) {
    if (!first) out += s.str();
    first = false;
    if (!item.is_string()) throw TemplateError("sequence item: expected str instance, " + item.type_name() + " found");
    out += item.str();
    interp.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value find_impl(const Value& s, CallArgs& args, bool right, bool raise) {
  BoundArgs a(right ? "rfind" : "find", args, {"sub"});
  int64_t i = py::find(s.str(), expect_str(a.get(0, Value::string("")), "substring"), right);
  if (raise && i < 0) throw TemplateError("substring not found");
  return Value::integer(i);
}
Value m_find(Interpreter&, const Value& s, CallArgs& a) { return find_impl(s, a, false, false); }
Value m_rfind(Interpreter&, const Value& s, CallArgs& a) { return find_impl(s, a, true, false); }
Value m_index(Interpreter&, const Value& s, CallArgs& a) { return find_impl(s, a, false, true); }
Value m_rindex(Interpreter&, const Value& s, CallArgs& a) { return find_impl(s, a, true, true); }

Value m_count(Interpreter&, const Value& self, CallArgs& args) {
  BoundArgs a("count", args, {"x"});
  if (self.is_string()) return Value::integer(py::count(self.str(), expect_str(a.get(0, Value::string("")), "substring")));
  int64_t n = 0;
  for (const Value& item : self.list().items) n += values_equal(item, a.get(0, Value())) ? 1 : 0;
  return Value::integer(n);
}

template <bool (*Pred)(char32_t)>
Value char_class(Interpreter&, const Value& s, CallArgs& args) {
  BoundArgs("is...", args, {});
  std::u32string cps = py::decode(s.str());
  if (cps.empty()) return Value::boolean(false);
  for (char32_t c : cps) {
    if (!Pred(c)) return Value::boolean(false);
  }
  return Value::boolean(true);
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0xc0; }
bool is_alnum(char32_t c) { return is_digit(c) || is_alpha(c); }

Value case_test(const Value& s, bool upper) { return Value::boolean(py::has_only_case(s.str(), upper)); }
Value m_islower(Interpreter&, const Value& s, CallArgs&) { return case_test(s, false); }
Value m_isupper(Interpreter&, const Value& s, CallArgs&) { return case_test(s, true); }

Value justify(Interpreter& interp, const Value& s, CallArgs& args, char how) {
  BoundArgs a("ljust", args, {"width", "fillchar"});
  int64_t width = expect_int(a.get(0, Value::integer(0)), "width");
  std::string fill = a.given(1) ? expect_str(a.at(1), "fillchar") : " ";
  if (py::length(fill) != 1) throw TemplateError("the fill character must be exactly one character long");
  int64_t len = static_cast<int64_t>(py::length(s.str()));
  if (width <= len) return s;
  interp.check_size(static_cast<size_t>(width) * fill.size());
  int64_t pad = width - len;
  int64_t left = how == 'l' ? 0 : how == 'r' ? pad : pad / 2 + (pad & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s.str();
  for (int64_t i = left; i < pad; ++i) out += fill;
  return Value::string(std::move(out));
}
Value m_ljust(Interpreter& i, const Value& s, CallArgs& a) { return justify(i, s, a, 'l'); }
Value m_rjust(Interpreter& i, const Value& s, CallArgs& a) { return justify(i, s, a, 'r'); }
Value m_center(Interpreter& i, const Value& s, CallArgs& a) { return justify(i, s, a, 'c'); }

Value m_zfill(Interpreter& interp, const Value& s, CallArgs& args) {
  BoundArgs a("zfill", args, {"width"});
  int64_t width = expect_int(a.get(0, Value::integer(0)), "width");
  int64_t len = static_cast<int64_t>(py::length(s.str()));
  if (width <= len) return s;
  interp.check_size(static_cast<size_t>(width));
  std::string body = s.str();
  std::string sign;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    sign = body.substr(0, 1);
    body.erase(0, 1);
  }
  return Value::string(sign + std::string(static_cast<size_t>(width - len), '0') + body);
}

Value m_splitlines(Interpreter&, const Value& s, CallArgs& args) {
  BoundArgs a("splitlines", args, {"keepends"});
  return strings(py::splitlines(s.str(), a.get(0, Value::boolean(false)).truthy()));
}

Value affix_remove(const Value& s, CallArgs& args, bool prefix) {
  BoundArgs a(prefix ? "removeprefix" : "removesuffix", args, {"affix"});
  const std::string& x = expect_str(a.get(0, Value::string("")), "affix");
  const std::string& str = s.str();
  if (x.size() > str.size()) return s;
  if (prefix && str.compare(0, x.size(), x) == 0) return Value::string(str.substr(x.size()));
  if (!prefix && str.compare(str.size() - x.size(), x.size(), x) == 0) {
    return Value::string(str.substr(0, str.size() - x.size()));
  }
  return s;
}
Value m_removeprefix(Interpreter&, const Value& s, CallArgs& a) { return affix_remove(s, a, true); }
Value m_removesuffix(Interpreter&, const Value& s, CallArgs& a) { return affix_remove(s, a, false); }

Value partition_impl(const Value& s, CallArgs& args, bool right) {
  BoundArgs a("partition", args, {"sep"});
  const std::string& sep = expect_str(a.get(0, Value::string("")), "separator");
  if (sep.empty()) throw TemplateError("empty separator");
  const std::string& str = s.str();
  size_t hit = right ? str.rfind(sep) : str.find(sep);
  if (hit == std::string::npos) {
    return right ? Value::list({Value::string(""), Value::string(""), s}, true)
                 : Value::list({s, Value::string(""), Value::string("")}, true);
  }
  return Value::list({Value::string(str.substr(0, hit)), Value::string(sep),
                      Value::string(str.substr(hit + sep.size()))}, true);
}
Value m_partition(Interpreter&, const Value& s, CallArgs& a) { return partition_impl(s, a, false); }
Value m_rpartition(Interpreter&, const Value& s, CallArgs& a) { return partition_impl(s, a, true); }

Value m_items(Interpreter&, const Value& d, CallArgs& args) {
  BoundArgs("items", args, {});
  std::vector<Value> pairs;
  for (const auto& [key, value] : d.dict().items) pairs.push_back(Value::list({Value::string(key), value}, true));
  return Value::list(std::move(pairs));
}

Value m_keys(Interpreter&, const Value& d, CallArgs& args) {
  BoundArgs("keys", args, {});
  std::vector<Value> keys;
  for (const auto& [key, value] : d.dict().items) keys.push_back(Value::string(key));
  return Value::list(std::move(keys));
}

Value m_values(Interpreter&, const Value& d, CallArgs& args) {
  BoundArgs("values", args, {});
  std::vector<Value> values;
  for (const auto& [key, value] : d.dict().items) values.push_back(value);
  return Value::list(std::move(values));
}

Value m_get(Interpreter&, const Value& d, CallArgs& args) {
  BoundArgs a("get", args, {"key", "default"}, 2);
  if (!a.has(0)) throw TemplateError("get expected at least 1 argument, got 0");
  if (a.at(0).is_string()) {
    if (const Value* v = d.dict().find(a.at(0).str())) return *v;
  }
  return a.get(1, Value::none());
}

Value m_copy(Interpreter&, const Value& self, CallArgs& args) {
  BoundArgs("copy", args, {});
  return self.is_dict() ? Value::dict(self.dict()) : Value::list(self.list().items);
}

Value m_list_index(Interpreter&, const Value& l, CallArgs& args) {
  BoundArgs a("index", args, {"x"});
  const auto& items = l.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], a.get(0, Value()))) return Value::integer(static_cast<int64_t>(i));
  }
  throw TemplateError(a.get(0, Value()).repr() + " is not in list");
}

const std::unordered_map<std::string_view, Method>& string_methods() {
  static const std::unordered_map<std::string_view, Method> kTable = {
      {"startswith", m_startswith}, {"endswith", m_endswith}, {"split", m_split},
      {"rsplit", m_rsplit}, {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip},
      {"replace", m_replace}, {"upper", m_upper}, {"lower", m_lower}, {"casefold", m_lower},
      {"title", m_title}, {"capitalize", m_capitalize}, {"format", m_format}, {"join", m_join},
      {"find", m_find}, {"rfind", m_rfind}, {"index", m_index}, {"rindex", m_rindex},
      {"count", m_count}, {"isdigit", char_class<is_digit>}, {"isdecimal", char_class<is_digit>},
      {"isnumeric", char_class<is_digit>}, {"isalpha", char_class<is_alpha>},
      {"isalnum", char_class<is_alnum>}, {"isspace", char_class<py::is_space>},
      {"islower", m_islower}, {"isupper", m_isupper}, {"ljust", m_ljust}, {"rjust", m_rjust},
      {"center", m_center}, {"zfill", m_zfill}, {"splitlines", m_splitlines},
      {"removeprefix", m_removeprefix}, {"removesuffix", m_removesuffix},
      {"partition", m_partition}, {"rpartition", m_rpartition},
  };
  return kTable;
}

const std::unordered_map<std::string_view, Method>& dict_methods() {
  static const std::unordered_map<std::string_view, Method> kTable = {
      {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}, {"copy", m_copy},
  };
  return kTable;
}

const std::unordered_map<std::string_view, Method>& list_methods() {
  static const std::unordered_map<std::string_view, Method> kTable = {
      {"index", m_list_index}, {"count", m_count}, {"copy", m_copy},
  };
  return kTable;
}

// Methods that exist but that ImmutableSandboxedEnvironment refuses to expose.
bool is_mutating(const Value& object, const std::string& name) {
  static const std::unordered_set<std::string_view> kDict = {"clear", "pop", "popitem", "setdefault", "update"};
  static const std::unordered_set<std::string_view> kList = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  return object.is_dict() ? kDict.count(name) > 0 : object.is_list() && kList.count(name) > 0;
}

}  // namespace

std::optional<Value> builtin_method(const Value& object, const std::string& name) {
  const std::unordered_map<std::string_view, Method>* table =
      object.is_string() ? &string_methods() : object.is_dict() ? &dict_methods()
                                            : object.is_list()  ? &list_methods() : nullptr;
  if (table == nullptr) return std::nullopt;
  auto it = table->find(name);
  if (it == table->end()) {
    if (is_mutating(object, name)) {
      return Value::undefined("access to attribute '" + name + "' of '" + object.type_name() +
                              "' object is unsafe.");
    }
    return std::nullopt;
  }
  Method method = it->second;
  Value self = object;
  return Value::function(name, [method, self](Interpreter& interp, CallArgs& args) {
    return method(interp, self, args);
  });
}

}  // namespace deltaserve::jinja
