// Python's json.dumps() over interpreter values, as transformers' tojson filter calls it:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
// Byte-identical output matters: tool schemas reach the prompt through it.
#pragma once

#include <optional>
#include <string>

#include "server/jinja/value.h"

namespace deltaserve::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line; "" still breaks lines (indent=0)
  // Python's defaults: (", ", ": ") on one line, (",", ": ") when indenting.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

// Throws TemplateError for values JSON cannot hold (undefined, namespace, callables), with
// Python's message: "Object of type Undefined is not JSON serializable".
std::string python_json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace deltaserve::jinja
