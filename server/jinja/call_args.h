// Binds the arguments of a builtin call the way Python binds a signature: positional first,
// then by keyword, with a clear error for surplus or unknown arguments.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "server/jinja/template_error.h"
#include "server/jinja/value.h"

namespace deltaserve::jinja {

class BoundArgs {
 public:
  // `params` names the parameters in order; `max_positional` < params.size() makes the rest
  // keyword-only (SIZE_MAX: all may be positional).
  BoundArgs(const std::string& function, const CallArgs& args,
            std::initializer_list<const char*> params, size_t max_positional = SIZE_MAX)
      : values_(params.size()) {
    std::vector<const char*> names(params);
    size_t limit = std::min(max_positional, names.size());
    if (args.positional.size() > limit) {
      throw TemplateError(function + "() takes at most " + std::to_string(limit) +
                          " positional argument(s) (" + std::to_string(args.positional.size()) +
                          " given)");
    }
    for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = args.positional[i];
    for (const auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < names.size() && key != names[i]) ++i;
      if (i == names.size()) {
        throw TemplateError(function + "() got an unexpected keyword argument '" + key + "'");
      }
      if (values_[i]) {
        throw TemplateError(function + "() got multiple values for argument '" + key + "'");
      }
      values_[i] = value;
    }
  }

  bool has(size_t i) const { return values_[i].has_value(); }
  Value get(size_t i, Value fallback) const { return values_[i] ? *values_[i] : fallback; }
  // A present, non-None argument.
  bool given(size_t i) const { return values_[i] && !values_[i]->is_none(); }
  const Value& at(size_t i) const { return *values_[i]; }

 private:
  std::vector<std::optional<Value>> values_;
};

// Helpers shared by filters and methods.
inline int64_t expect_int(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.int_value();
  throw TemplateError(std::string(what) + " must be an integer, not '" + v.type_name() + "'");
}

inline const std::string& expect_str(const Value& v, const char* what) {
  if (v.is_string()) return v.str();
  throw TemplateError(std::string(what) + " must be a string, not '" + v.type_name() + "'");
}

}  // namespace deltaserve::jinja
