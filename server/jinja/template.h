// A Jinja template interpreter for Hugging Face chat templates.
//
// It implements the subset of jinja2 that chat templates use, with jinja2's semantics as
// transformers configures them in apply_chat_template: ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, jinja2's default
// Undefined, a tojson filter that is Python's json.dumps(ensure_ascii=False), and the globals
// raise_exception(msg) and strftime_now(fmt).
//
// Usage:
//   Template t = Template::parse(source);                 // TemplateError if malformed
//   std::string prompt = t.render(context);               // TemplateError on runtime errors
//
// A Template is immutable after parse(): copy it freely (the AST is shared) and render it from
// any number of threads at once. render() is CPU-bound and never blocks. Every error, whether a
// syntax error, a raise_exception() call, a type error or a resource limit, is a TemplateError;
// nothing crashes and nothing loops forever (see RenderOptions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/jinja/template_error.h"

namespace deltaserve::jinja {

struct Program;

struct RenderOptions {
  // Upper bound on the bytes of text produced during a render (captured text included) and on
  // any single string a template builds.
  size_t max_output_bytes = size_t{64} << 20;
  // Loop iterations, macro calls and statements executed; bounds the CPU time of a render
  // (about a second at the limit). A 10k-message conversation takes a few hundred thousand.
  uint64_t max_steps = 2'000'000;
  // Macro recursion depth (jinja2 would hit Python's recursion limit somewhat later).
  int max_call_depth = 100;
  // The broken-down local time strftime_now() formats; empty = the system clock. Tests inject a
  // fixed time here.
  std::function<std::tm()> local_time;
};

class Template {
 public:
  // Throws TemplateError (with line and column) on any syntax error, unknown tag, filter or test.
  static Template parse(std::string_view source);

  // Renders with `context` as the top-level variables (a JSON object). Object key order is
  // kept, so tojson writes keys in the order the caller gave them, as Python does; parse request
  // bodies into nlohmann::ordered_json to keep the client's order.
  std::string render(const nlohmann::ordered_json& context,
                     const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace deltaserve::jinja
