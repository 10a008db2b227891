// The global functions templates can call: range, dict, namespace, joiner, and transformers'
// raise_exception and strftime_now.
#include <ctime>
#include <memory>
#include <unordered_map>

#include "server/jinja/builtins.h"
#include "server/jinja/call_args.h"
#include "server/jinja/interpreter.h"

namespace deltaserve::jinja {
namespace {

Value make_range(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    throw TemplateError("range expected 1 to 3 integer arguments");
  }
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = expect_int(args.positional[0], "range() argument");
  } else {
    start = expect_int(args.positional[0], "range() argument");
    stop = expect_int(args.positional[1], "range() argument");
    if (args.positional.size() == 3) step = expect_int(args.positional[2], "range() step");
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (items.size() >= 100000) {
      throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

Dict dict_from_args(CallArgs& args, const char* fn) {
  Dict out;
  if (args.positional.size() > 1) throw TemplateError(std::string(fn) + "() takes at most 1 positional argument");
  if (!args.positional.empty()) {
    if (!args.positional[0].is_dict()) throw TemplateError(std::string(fn) + "() positional argument must be a mapping");
    out = args.positional[0].dict();
  }
  for (auto& [key, value] : args.keyword) out.set(key, value);
  return out;
}

Value make_namespace(Interpreter&, CallArgs& args) {
  Dict attrs = dict_from_args(args, "namespace");
  for (const auto& [key, value] : attrs.items) {
    if (value.holds_ref()) throw TemplateError("a namespace attribute cannot hold namespaces, macros or functions");
  }
  return Value::make_namespace(std::move(attrs));
}

Value strftime_now(Interpreter& interp, CallArgs& args) {
  BoundArgs a("strftime_now", args, {"format"});
  const std::string& format = expect_str(a.get(0, Value::string("")), "strftime_now format");
  std::tm tm{};
  if (interp.options().local_time) {
    tm = interp.options().local_time();
  } else {
    std::time_t now = std::time(nullptr);
    localtime_r(&now, &tm);
  }
  if (format.empty()) return Value::string("");
  std::string buf(format.size() * 8 + 64, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  if (n == 0) throw TemplateError("strftime_now: format produced no output or is too long");
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

std::optional<Value> builtin_global(std::string_view name) {
  static const std::unordered_map<std::string_view, Value> kGlobals = [] {
    std::unordered_map<std::string_view, Value> g;
    g.emplace("range", Value::function("range", make_range));
    g.emplace("namespace", Value::function("namespace", make_namespace));
    g.emplace("dict", Value::function("dict", [](Interpreter&, CallArgs& args) {
      return Value::dict(dict_from_args(args, "dict"));
    }));
    g.emplace("raise_exception", Value::function("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
      BoundArgs a("raise_exception", args, {"message"});
      throw TemplateError(a.get(0, Value::string("")).to_str());
    }));
    g.emplace("strftime_now", Value::function("strftime_now", strftime_now));
    g.emplace("joiner", Value::function("joiner", [](Interpreter&, CallArgs& args) {
      BoundArgs a("joiner", args, {"sep"});
      std::string sep = a.get(0, Value::string(", ")).to_str();
      auto used = std::make_shared<bool>(false);
      return Value::function("joiner", [sep, used](Interpreter&, CallArgs&) {
        if (!*used) {
          *used = true;
          return Value::string("");
        }
        return Value::string(sep);
      });
    }));
    return g;
  }();
  auto it = kGlobals.find(name);
  if (it == kGlobals.end()) return std::nullopt;
  return it->second;
}

}  // namespace deltaserve::jinja
