// Expression evaluation half of the Interpreter: Python operator semantics and jinja2's
// attribute/item lookup rules.
#include <cmath>
#include <limits>

#include "server/jinja/builtins.h"
#include "server/jinja/interpreter.h"
#include "server/jinja/py_string.h"
#include "server/jinja/string_format.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

[[noreturn]] void throw_undefined(const Value& v) { throw TemplateError(v.undefined_hint()); }

std::string object_desc(const Value& v) {
  if (v.is_none()) return "'None'";
  return "'" + v.type_name() + " object'";
}

bool int_like(const Value& v) { return v.is_int() || v.is_bool(); }

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + std::string(op) + ": '" +
                      a.type_name() + "' and '" + b.type_name() + "'");
}

[[noreturn]] void overflow() {
  throw TemplateError("integer overflow (values beyond 64 bits are not supported)");
}

int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value repeat(const Interpreter& interp, const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.list().is_tuple);
  if (seq.is_string()) {
    interp.check_size(seq.str().size() * static_cast<size_t>(std::min<int64_t>(times, 1 << 30)));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value::string(std::move(out));
  }
  interp.check_size(seq.list().items.size() * static_cast<size_t>(std::min<int64_t>(times, 1 << 30)));
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) {
    out.insert(out.end(), seq.list().items.begin(), seq.list().items.end());
  }
  return Value::list(std::move(out), seq.list().is_tuple);
}

Value int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul(result, base);
    exp >>= 1;
    if (exp > 0) base = mul(base, base);
  }
  return Value::integer(result);
}

Value arithmetic(const Interpreter& interp, BinaryExpr::Op op, const Value& a, const Value& b) {
  static const char* const kSymbols[] = {"+", "-", "*", "/", "//", "%", "**"};
  std::string_view sym = kSymbols[static_cast<int>(op)];
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    bool ints = int_like(a) && int_like(b);
    int64_t x = ints ? a.int_value() : 0;
    int64_t y = ints ? b.int_value() : 0;
    double p = a.as_double();
    double q = b.as_double();
    switch (op) {
      case BinaryExpr::Op::kAdd: return ints ? Value::integer(add(x, y)) : Value::number(p + q);
      case BinaryExpr::Op::kSub: return ints ? Value::integer(sub(x, y)) : Value::number(p - q);
      case BinaryExpr::Op::kMul: return ints ? Value::integer(mul(x, y)) : Value::number(p * q);
      case BinaryExpr::Op::kDiv:
        if (q == 0) throw TemplateError("division by zero");
        return Value::number(p / q);
      case BinaryExpr::Op::kFloorDiv:
      case BinaryExpr::Op::kMod: {
        if (ints) {
          if (y == 0) throw TemplateError("integer division or modulo by zero");
          if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow();
          int64_t quot = x / y;
          int64_t rem = x % y;
          if (rem != 0 && ((rem < 0) != (y < 0))) {
            --quot;
            rem += y;
          }
          return Value::integer(op == BinaryExpr::Op::kMod ? rem : quot);
        }
        if (q == 0) throw TemplateError("float division by zero");
        // CPython's float_divmod, so -7.5 // 2 and -7.5 % 2 match Python exactly.
        double mod = std::fmod(p, q);
        double div = (p - mod) / q;
        if (mod != 0 && ((q < 0) != (mod < 0))) {
          mod += q;
          div -= 1.0;
        }
        if (op == BinaryExpr::Op::kMod) return Value::number(mod != 0 ? mod : std::copysign(0.0, q));
        double floordiv = std::copysign(0.0, p / q);
        if (div != 0) {
          floordiv = std::floor(div);
          if (div - floordiv > 0.5) floordiv += 1.0;
        }
        return Value::number(floordiv);
      }
      case BinaryExpr::Op::kPow:
        if (ints && y >= 0) return int_pow(x, y);
        if (p == 0 && q < 0) throw TemplateError("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(p, q));
      default: break;
    }
  }
  if (op == BinaryExpr::Op::kAdd) {
    if (a.is_string() && b.is_string()) {
      interp.check_size(a.str().size() + b.str().size());
      return Value::string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::list(std::move(items), a.list().is_tuple);
    }
    if (a.is_string()) {
      throw TemplateError("can only concatenate str (not \"" + b.type_name() + "\") to str");
    }
  }
  if (op == BinaryExpr::Op::kMul) {
    if ((a.is_string() || a.is_list()) && int_like(b)) return repeat(interp, a, b.int_value());
    if ((b.is_string() || b.is_list()) && int_like(a)) return repeat(interp, b, a.int_value());
  }
  if (op == BinaryExpr::Op::kMod && a.is_string()) {
    std::string out = percent_format(a.str(), b);
    interp.check_size(out.size());
    return Value::string(std::move(out));
  }
  unsupported(sym, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list().items) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict: return item.is_string() && container.dict().find(item.str()) != nullptr;
    default:
      throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!int_like(v)) throw TemplateError("slice indices must be integers or None");
  return v.int_value();
}

}  // namespace

Value Interpreter::lookup(const std::string& name) const {
  for (const Frame* frame = current_; frame != nullptr; frame = frame->parent) {
    auto it = frame->vars.find(name);
    if (it != frame->vars.end()) return it->second;
  }
  if (const Value* v = context_->find(name)) return *v;
  if (auto global = builtin_global(name)) return *global;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& expr) {
  try {
    return eval_inner(expr);
  } catch (const TemplateError& e) {
    if (e.line() > 0) throw;
    throw TemplateError(e.message(), expr.line, expr.column);
  }
}

Value Interpreter::eval_inner(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral: return static_cast<const LiteralExpr&>(expr).value;
    case Expr::Kind::kName: return lookup(static_cast<const NameExpr&>(expr).name);
    case Expr::Kind::kList: {
      const auto& e = static_cast<const ListExpr&>(expr);
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(eval(*item));
      return Value::list(std::move(items), e.is_tuple);
    }
    case Expr::Kind::kDict: {
      Dict dict;
      for (const auto& [key_expr, value_expr] : static_cast<const DictExpr&>(expr).items) {
        Value key = eval(*key_expr);
        if (!key.is_string()) throw TemplateError("dict literal keys must be strings");
        dict.set(key.str(), eval(*value_expr));
      }
      return Value::dict(std::move(dict));
    }
    case Expr::Kind::kGetAttr: {
      const auto& e = static_cast<const GetAttrExpr&>(expr);
      return getattr(eval(*e.object), e.name);
    }
    case Expr::Kind::kGetItem: {
      const auto& e = static_cast<const GetItemExpr&>(expr);
      Value object = eval(*e.object);
      return getitem(object, eval(*e.index));
    }
    case Expr::Kind::kSlice: return eval_slice(static_cast<const SliceExpr&>(expr));
    case Expr::Kind::kCall: {
      const auto& e = static_cast<const CallExpr&>(expr);
      Value callee = eval(*e.callee);
      CallArgs args = eval_args(e.args);
      return call(callee, args);
    }
    case Expr::Kind::kFilter: return eval_filter(static_cast<const FilterExpr&>(expr));
    case Expr::Kind::kTest: {
      const auto& e = static_cast<const TestExpr&>(expr);
      Value input = eval(*e.input);
      CallArgs args = eval_args(e.args);
      return Value::boolean(apply_test(*this, e.name, input, args) != e.negated);
    }
    case Expr::Kind::kUnary: {
      const auto& e = static_cast<const UnaryExpr&>(expr);
      Value v = eval(*e.operand);
      if (e.op == UnaryExpr::Op::kNot) return Value::boolean(!v.truthy());
      if (v.is_undefined()) throw_undefined(v);
      if (!v.is_number()) {
        throw TemplateError(std::string("bad operand type for unary ") +
                            (e.op == UnaryExpr::Op::kNeg ? "-" : "+") + ": '" + v.type_name() + "'");
      }
      if (e.op == UnaryExpr::Op::kPos) return v.is_bool() ? Value::integer(v.int_value()) : v;
      if (v.is_float()) return Value::number(-v.as_double());
      if (v.int_value() == std::numeric_limits<int64_t>::min()) overflow();
      return Value::integer(-v.int_value());
    }
    case Expr::Kind::kBinary: return eval_binary(static_cast<const BinaryExpr&>(expr));
    case Expr::Kind::kCond: {
      const auto& e = static_cast<const CondExpr&>(expr);
      if (eval(*e.cond).truthy()) return eval(*e.then);
      if (e.otherwise) return eval(*e.otherwise);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined");
    }
  }
  throw TemplateError("unknown expression");
}

Value Interpreter::eval_binary(const BinaryExpr& e) {
  using Op = BinaryExpr::Op;
  if (e.op == Op::kAnd || e.op == Op::kOr) {
    Value left = eval(*e.lhs);
    if (left.truthy() == (e.op == Op::kOr)) return left;
    return eval(*e.rhs);
  }
  Value a = eval(*e.lhs);
  Value b = eval(*e.rhs);
  switch (e.op) {
    case Op::kConcat: {
      std::string out = a.to_str();
      out += b.to_str();
      check_size(out.size());
      return Value::string(std::move(out));
    }
    case Op::kEq: return Value::boolean(values_equal(a, b));
    case Op::kNe: return Value::boolean(!values_equal(a, b));
    case Op::kLt: return Value::boolean(value_less(a, b, "<"));
    case Op::kGt: return Value::boolean(value_less(b, a, ">"));
    case Op::kLe: return Value::boolean(!value_less(b, a, "<="));
    case Op::kGe: return Value::boolean(!value_less(a, b, ">="));
    case Op::kIn: return Value::boolean(contains(b, a));
    case Op::kNotIn: return Value::boolean(!contains(b, a));
    default: return arithmetic(*this, e.op, a, b);
  }
}

Value Interpreter::eval_slice(const SliceExpr& e) {
  Value object = eval(*e.object);
  std::optional<int64_t> start, stop, step;
  if (e.start) start = slice_bound(eval(*e.start));
  if (e.stop) stop = slice_bound(eval(*e.stop));
  if (e.step) step = slice_bound(eval(*e.step));
  if (object.is_undefined()) throw_undefined(object);
  if (object.is_string()) return Value::string(py::slice(object.str(), start, stop, step));
  if (object.is_list()) {
    const auto& items = object.list().items;
    std::vector<Value> out;
    for (int64_t i : py::slice_indices(static_cast<int64_t>(items.size()), start, stop, step)) {
      out.push_back(items[static_cast<size_t>(i)]);
    }
    return Value::list(std::move(out), object.list().is_tuple);
  }
  // jinja2 compiles slices to a plain Python subscript, so this is Python's TypeError.
  throw TemplateError(object.is_dict() ? "unhashable type: 'slice'"
                                       : "'" + object.type_name() + "' object is not subscriptable");
}

Value Interpreter::eval_filter(const FilterExpr& e) {
  Value input = e.input ? eval(*e.input) : filter_block_input_;
  CallArgs args = eval_args(e.args);
  return apply_filter(*this, e.name, input, args);
}

CallArgs Interpreter::eval_args(const CallArgExprs& args) {
  CallArgs out;
  out.positional.reserve(args.positional.size());
  for (const ExprPtr& arg : args.positional) out.positional.push_back(eval(*arg));
  for (const auto& [key, arg] : args.keyword) out.keyword.emplace_back(key, eval(*arg));
  return out;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) {
    tick();
    return callee.fn().call(*this, args);
  }
  if (callee.is_undefined()) throw_undefined(callee);
  throw TemplateError("'" + callee.type_name() + "' object is not callable");
}

Value Interpreter::getattr(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined: throw_undefined(object);
    case Value::Kind::kDict:
      if (auto method = builtin_method(object, name)) return *method;
      if (const Value* v = object.dict().find(name)) return *v;
      break;
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (auto method = builtin_method(object, name)) return *method;
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = object.ns().attrs.find(name)) return *v;
      break;
    default: break;
  }
  return Value::undefined(object_desc(object) + " has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& object, const Value& key) {
  if (object.is_undefined()) throw_undefined(object);
  if (object.is_dict() && key.is_string()) {
    if (const Value* v = object.dict().find(key.str())) return *v;
  } else if ((object.is_list() || object.is_string()) && int_like(key)) {
    int64_t index = key.int_value();
    if (object.is_list()) {
      const auto& items = object.list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return items[static_cast<size_t>(index)];
    } else if (auto ch = py::at(object.str(), index)) {
      return Value::string(std::move(*ch));
    }
    return Value::undefined(object_desc(object) + " has no element " + std::to_string(key.int_value()));
  }
  if (key.is_string()) {
    if (object.is_namespace()) {
      if (const Value* v = object.ns().attrs.find(key.str())) return *v;
    } else if (auto method = builtin_method(object, key.str())) {
      return *method;
    }
    return Value::undefined(object_desc(object) + " has no attribute '" + key.str() + "'");
  }
  return Value::undefined(object_desc(object) + " has no element " + key.repr());
}

std::vector<Value> Interpreter::iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return value.list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(value.dict().items.size());
      for (const auto& [key, v] : value.dict().items) keys.push_back(Value::string(key));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      std::string buf;
      for (char32_t cp : py::decode(value.str())) {
        buf.clear();
        py::append_utf8(buf, cp);
        chars.push_back(Value::string(buf));
      }
      return chars;
    }
    default: throw TemplateError("'" + value.type_name() + "' object is not iterable");
  }
}

}  // namespace deltaserve::jinja
