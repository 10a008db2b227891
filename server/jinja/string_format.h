// Python's two string formatting languages: printf-style `fmt % args` (jinja2's format filter
// and the % operator on strings) and str.format(). Covers the conversions templates use
// (%s %r %d %i %f %e %g %x %o %c %%, {} {0} {name} {x.attr} with a format spec).
#pragma once

#include <string>

#include "server/jinja/value.h"

namespace deltaserve::jinja {

class Interpreter;

// `operand` is a tuple (positional arguments), a dict (for %(name)s) or a single value.
std::string percent_format(const std::string& format, const Value& operand);

// str.format(*args, **kwargs); attribute and item lookups in fields go through `interp`.
std::string brace_format(Interpreter& interp, const std::string& format, const CallArgs& args);

}  // namespace deltaserve::jinja
