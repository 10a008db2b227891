// jinja2's builtin tests (tests.py): `x is defined`, `x is string`, `x is divisibleby 3`, ...
#include <cmath>
#include <unordered_map>

#include "server/jinja/builtins.h"
#include "server/jinja/call_args.h"
#include "server/jinja/interpreter.h"
#include "server/jinja/py_string.h"

namespace deltaserve::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

const Value& arg(const std::string& test, CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty()) {
    throw TemplateError("test '" + test + "' takes exactly one argument");
  }
  return args.positional[0];
}

void no_args(const std::string& test, const CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    throw TemplateError("test '" + test + "' takes no arguments");
  }
}

// Python's `value % divisor` for the numeric tests, floats included (3.5 % 2 == 1.5).
double py_mod(const Value& v, const Value& divisor, const char* test) {
  if (v.is_undefined()) throw TemplateError(v.undefined_hint());
  if (!v.is_number() || !divisor.is_number()) {
    throw TemplateError(std::string("test '") + test + "' needs numbers, got '" + v.type_name() + "'");
  }
  if (!v.is_float() && !divisor.is_float()) {
    int64_t d = divisor.int_value();
    if (d == 0) throw TemplateError("integer division or modulo by zero");
    int64_t r = v.int_value() % d;
    if (r != 0 && ((r < 0) != (d < 0))) r += d;
    return static_cast<double>(r);
  }
  double d = divisor.as_double();
  if (d == 0) throw TemplateError("float modulo");
  double r = std::fmod(v.as_double(), d);
  if (r != 0 && ((r < 0) != (d < 0))) r += d;
  return r;
}

#define NO_ARG_TEST(fn, name, expr)                             \
  bool fn(Interpreter&, const Value& v, CallArgs& args) {       \
    no_args(name, args);                                        \
    return (expr);                                              \
  }

NO_ARG_TEST(t_defined, "defined", !v.is_undefined())
NO_ARG_TEST(t_undefined, "undefined", v.is_undefined())
NO_ARG_TEST(t_none, "none", v.is_none())
NO_ARG_TEST(t_boolean, "boolean", v.is_bool())
NO_ARG_TEST(t_true, "true", v.is_bool() && v.as_bool())
NO_ARG_TEST(t_false, "false", v.is_bool() && !v.as_bool())
NO_ARG_TEST(t_string, "string", v.is_string())
NO_ARG_TEST(t_mapping, "mapping", v.is_dict())
NO_ARG_TEST(t_number, "number", v.is_number())
NO_ARG_TEST(t_integer, "integer", v.is_int())
NO_ARG_TEST(t_float, "float", v.is_float())
NO_ARG_TEST(t_callable, "callable", v.is_function() || v.is_undefined())
// Undefined has __len__, __getitem__ and __iter__ in jinja2, so it passes both.
NO_ARG_TEST(t_iterable, "iterable", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
NO_ARG_TEST(t_sequence, "sequence", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
NO_ARG_TEST(t_escaped, "escaped", (static_cast<void>(v), false))
NO_ARG_TEST(t_lower, "lower", py::has_only_case(v.to_str(), false))
NO_ARG_TEST(t_upper, "upper", py::has_only_case(v.to_str(), true))
NO_ARG_TEST(t_even, "even", py_mod(v, Value::integer(2), "even") == 0)
NO_ARG_TEST(t_odd, "odd", py_mod(v, Value::integer(2), "odd") == 1)

bool t_divisibleby(Interpreter&, const Value& v, CallArgs& args) {
  return py_mod(v, arg("divisibleby", args), "divisibleby") == 0;
}

bool t_eq(Interpreter&, const Value& v, CallArgs& args) { return values_equal(v, arg("eq", args)); }
bool t_ne(Interpreter&, const Value& v, CallArgs& args) { return !values_equal(v, arg("ne", args)); }
bool t_lt(Interpreter&, const Value& v, CallArgs& args) { return value_less(v, arg("lt", args), "<"); }
bool t_gt(Interpreter&, const Value& v, CallArgs& args) { return value_less(arg("gt", args), v, ">"); }
bool t_le(Interpreter&, const Value& v, CallArgs& args) { return !value_less(arg("le", args), v, "<="); }
bool t_ge(Interpreter&, const Value& v, CallArgs& args) { return !value_less(v, arg("ge", args), ">="); }
bool t_sameas(Interpreter&, const Value& v, CallArgs& args) { return v.same_object(arg("sameas", args)); }

bool t_in(Interpreter& interp, const Value& v, CallArgs& args) {
  const Value& seq = arg("in", args);
  if (seq.is_string()) {
    if (!v.is_string()) throw TemplateError("'in <string>' requires string as left operand");
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_dict()) return v.is_string() && seq.dict().find(v.str()) != nullptr;
  for (const Value& item : interp.iterate(seq)) {
    if (values_equal(item, v)) return true;
  }
  return false;
}

bool t_filter(Interpreter&, const Value& v, CallArgs& args) {
  no_args("filter", args);
  return v.is_string() && is_known_filter(v.str());
}

bool t_test(Interpreter&, const Value& v, CallArgs& args) {
  no_args("test", args);
  return v.is_string() && is_known_test(v.str());
}

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> kTable = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
      {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"escaped", t_escaped},
      {"even", t_even}, {"false", t_false}, {"filter", t_filter}, {"float", t_float},
      {"ge", t_ge}, {"greaterthan", t_gt}, {"gt", t_gt}, {"in", t_in}, {"integer", t_integer},
      {"iterable", t_iterable}, {"le", t_le}, {"lessthan", t_lt}, {"lower", t_lower},
      {"lt", t_lt}, {"mapping", t_mapping}, {"ne", t_ne}, {"none", t_none},
      {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
      {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return kTable;
}

}  // namespace

bool is_known_test(std::string_view name) { return test_table().count(name) > 0; }

bool apply_test(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args) {
  auto it = test_table().find(name);
  if (it == test_table().end()) throw TemplateError("no test named '" + name + "'");
  return it->second(interp, input, args);
}

}  // namespace deltaserve::jinja
