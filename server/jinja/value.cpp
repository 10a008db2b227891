#include "server/jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "server/jinja/template_error.h"

namespace deltaserve::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  return Value(UndefinedTag{std::make_shared<const std::string>(std::move(hint))});
}

Value Value::string(std::string s) { return Value(std::make_shared<const std::string>(std::move(s))); }

namespace {

void check_depth(uint32_t depth) {
  if (depth > kMaxValueDepth) {
    throw TemplateError("value nesting is deeper than " + std::to_string(kMaxValueDepth) +
                        " levels");
  }
}

}  // namespace

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto stored = std::make_shared<StoredList>();
  for (const Value& item : items) {
    stored->meta.depth = std::max(stored->meta.depth, item.depth() + 1);
    stored->meta.holds_ref = stored->meta.holds_ref || item.holds_ref();
  }
  check_depth(stored->meta.depth);
  stored->items = std::move(items);
  stored->is_tuple = is_tuple;
  return Value(ListPtr(std::move(stored)));
}

Value Value::dict(Dict dict) {
  auto stored = std::make_shared<StoredDict>();
  for (const auto& [key, item] : dict.items) {
    stored->meta.depth = std::max(stored->meta.depth, item.depth() + 1);
    stored->meta.holds_ref = stored->meta.holds_ref || item.holds_ref();
  }
  check_depth(stored->meta.depth);
  stored->items = std::move(dict.items);
  return Value(DictPtr(std::move(stored)));
}

Value Value::make_namespace(Dict attrs) {
  auto ns = std::make_shared<Namespace>();
  ns->attrs = std::move(attrs);
  return Value(NsPtr(std::move(ns)));
}

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  return Value(FnPtr(std::make_shared<const Function>(Function{std::move(name), std::move(fn)})));
}

namespace {

Value from_json_at(const nlohmann::ordered_json& json, uint32_t depth) {
  check_depth(depth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::number(static_cast<double>(u));
      }
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      dict.items.reserve(json.size());
      // JSON object keys are unique (ordered_json keeps one per key): append, no lookup, so a
      // huge untrusted object converts in linear time.
      for (const auto& [key, item] : json.items()) dict.items.emplace_back(key, from_json_at(item, depth + 1));
      return Value::dict(std::move(dict));
    }
    default: throw TemplateError("unsupported JSON value (binary or discarded)");
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 1); }

double Value::as_double() const {
  switch (kind()) {
    case Kind::kBool: return as_bool() ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(as_int());
    default: return std::get<double>(v_);
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string kGeneric = "value is undefined";
  const auto& hint = std::get<UndefinedTag>(v_).hint;
  return hint && !hint->empty() ? *hint : kGeneric;
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return std::get<double>(v_) != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kList: return !list().items.empty();
    case Kind::kDict: return !dict().items.empty();
    default: return true;
  }
}

uint32_t Value::depth() const {
  switch (kind()) {
    case Kind::kList: return std::get<ListPtr>(v_)->meta.depth;
    case Kind::kDict: return std::get<DictPtr>(v_)->meta.depth;
    case Kind::kNamespace: {
      uint32_t depth = 1;
      for (const auto& [k, v] : ns().attrs.items) depth = std::max(depth, v.depth() + 1);
      return depth;
    }
    default: return 0;
  }
}

bool Value::holds_ref() const {
  switch (kind()) {
    case Kind::kList: return std::get<ListPtr>(v_)->meta.holds_ref;
    case Kind::kDict: return std::get<DictPtr>(v_)->meta.holds_ref;
    case Kind::kNamespace:
    case Kind::kFunction: return true;
    default: return false;
  }
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList: return std::get<ListPtr>(v_) == std::get<ListPtr>(other.v_);
    case Kind::kDict: return std::get<DictPtr>(v_) == std::get<DictPtr>(other.v_);
    case Kind::kNamespace: return std::get<NsPtr>(v_) == std::get<NsPtr>(other.v_);
    case Kind::kFunction: return std::get<FnPtr>(v_) == std::get<FnPtr>(other.v_);
    case Kind::kString: return std::get<StrPtr>(v_) == std::get<StrPtr>(other.v_) ||
                               str() == other.str();  // CPython interns short literals
    default: return values_equal(*this, other);       // None, True, small ints: singletons
  }
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return list().is_tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunction: return "function";
  }
  return "object";
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is "-d.ddde+XX": split into sign, significant digits and decimal exponent.
  std::string s(buf);
  bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  size_t e_pos = s.find('e');
  int exponent = std::atoi(s.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[24];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::string repr_string(std::string_view s) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) quote = '"';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      // U+0080..U+009F (C1 controls) are not printable: Python shows them as \x80..\x9f.
      char buf[16];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(s[++i]));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

void Value::repr_into(std::string& out) const {
  switch (kind()) {
    case Kind::kString: out += repr_string(str()); return;
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kList: {
      const List& l = list();
      out += l.is_tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out += ", ";
        l.items[i].repr_into(out);
      }
      if (l.is_tuple && l.items.size() == 1) out += ',';
      out += l.is_tuple ? ')' : ']';
      return;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      const Dict& d = is_dict() ? dict() : ns().attrs;
      out += is_dict() ? "{" : "<Namespace {";
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += repr_string(d.items[i].first) + ": ";
        d.items[i].second.repr_into(out);
      }
      out += is_dict() ? "}" : "}>";
      return;
    }
    default: out += to_str(); return;
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(out);
  return out;
}

std::string Value::to_str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(as_int());
    case Kind::kFloat: return format_float(std::get<double>(v_));
    case Kind::kString: return str();
    case Kind::kFunction: return "<function " + fn().name + ">";
    default: return repr();
  }
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      const List& x = a.list();
      const List& y = b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.find(key);
        if (other == nullptr || !values_equal(value, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

bool value_less(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) throw TemplateError(a.undefined_hint());
  if (b.is_undefined()) throw TemplateError(b.undefined_hint());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return value_less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  throw TemplateError("'" + std::string(op) + "' not supported between instances of '" +
                      a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace deltaserve::jinja
