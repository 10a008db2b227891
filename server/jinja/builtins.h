// The builtin library of the interpreter: jinja2's filters and tests, the methods of str, dict
// and list that the sandbox allows, and the globals transformers provides (range, dict,
// namespace, raise_exception, strftime_now). Mutating methods (list.append, dict.update, ...)
// resolve to an undefined value that fails when called, as in ImmutableSandboxedEnvironment.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/jinja/value.h"

namespace deltaserve::jinja {

class Interpreter;

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// `input` is the filtered value; throws TemplateError on bad arguments or types.
Value apply_filter(Interpreter& interp, const std::string& name, const Value& input,
                   CallArgs& args);
bool apply_test(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args);

// obj.name for str, dict and list objects: a bound method, or nullopt when the type has no such
// attribute (the caller then tries obj[name]).
std::optional<Value> builtin_method(const Value& object, const std::string& name);

// A global function by name (range, dict, namespace, raise_exception, strftime_now, ...), or
// nullopt.
std::optional<Value> builtin_global(std::string_view name);

}  // namespace deltaserve::jinja
