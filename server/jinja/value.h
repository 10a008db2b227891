// Runtime values of the Jinja interpreter, with Python semantics (jinja2 runs on Python, and a
// chat template is only "right" when it renders byte-identically to transformers).
//
// A Value is cheap to copy: strings and containers are shared and immutable once built (the
// sandbox transformers uses forbids list.append and friends). The one mutable object is a
// namespace(), which may not hold namespaces or callables, so values never form cycles.
// Containers track their nesting depth and refuse more than kMaxValueDepth levels, which keeps
// every recursive walk (repr, tojson, ==, destruction) within a bounded stack.
//
// Thread safety: a Value is not shared between renders; concurrent renders never share values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace deltaserve::jinja {

class Interpreter;
class Value;

inline constexpr uint32_t kMaxValueDepth = 512;

// An insertion-ordered string-keyed map, like a Python dict built from JSON.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  // Overwrites in place when the key exists (Python keeps the original position).
  void set(std::string key, Value value);
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes repr() and ==, as in Python
};

// jinja2's namespace(): the only object a template may mutate ({% set ns.x = ... %}).
struct Namespace {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Builtins, bound methods ('abc'.upper), macros and caller(): all are called the same way.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction
  };

  Value() : v_(UndefinedTag{}) {}
  // An undefined value; `hint` is the error raised when it is used in a way jinja2's default
  // Undefined forbids (attribute access, calls, arithmetic), e.g. "'x' is undefined".
  static Value undefined(std::string hint);
  static Value none() { return Value(NoneTag{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value number(double d) { return Value(d); }
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(Dict dict);
  static Value make_namespace(Dict attrs);
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);
  // JSON -> Value keeping object key order (so tojson round-trips like Python's json module).
  // Integers above INT64_MAX become floats. Throws TemplateError past kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }
  // Python's numbers.Number: bool counts (True + 1 == 2).
  bool is_number() const { return is_bool() || is_int() || is_float(); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }  // kInt only
  int64_t int_value() const { return is_bool() ? as_bool() : as_int(); }  // bool or int
  double as_double() const;                                  // any number
  const std::string& str() const { return *std::get<StrPtr>(v_); }
  const List& list() const { return *std::get<ListPtr>(v_); }
  const Dict& dict() const { return *std::get<DictPtr>(v_); }
  Namespace& ns() const { return *std::get<NsPtr>(v_); }
  const Function& fn() const { return *std::get<FnPtr>(v_); }
  const std::string& undefined_hint() const;

  bool truthy() const;             // Python bool()
  std::string to_str() const;      // Python str(); undefined prints as ""
  std::string repr() const;        // Python repr()
  std::string type_name() const;   // Python type name, for error messages
  uint32_t depth() const;          // 0 for scalars, 1 + deepest child for containers
  bool holds_ref() const;          // is or contains a namespace or callable
  bool same_object(const Value& other) const;  // Python `is`

 private:
  struct UndefinedTag { std::shared_ptr<const std::string> hint; };
  struct NoneTag {};
  struct Meta { uint32_t depth = 1; bool holds_ref = false; };
  struct StoredList : List { Meta meta; };
  struct StoredDict : Dict { Meta meta; };
  using StrPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const StoredList>;
  using DictPtr = std::shared_ptr<const StoredDict>;
  using NsPtr = std::shared_ptr<Namespace>;
  using FnPtr = std::shared_ptr<const Function>;

  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  void repr_into(std::string& out) const;

  std::variant<UndefinedTag, NoneTag, bool, int64_t, double, StrPtr, ListPtr, DictPtr, NsPtr,
               FnPtr>
      v_;
};

// Python ==, for any two values (never throws).
bool values_equal(const Value& a, const Value& b);
// Python <, for numbers, strings and same-typed sequences; TemplateError otherwise
// ("'<' not supported between instances of 'str' and 'int'"). `op` names the operator.
bool value_less(const Value& a, const Value& b, std::string_view op = "<");
// Python float repr(): shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string format_float(double d);
// Python repr() of a str.
std::string repr_string(std::string_view s);

}  // namespace deltaserve::jinja
