// Renders a parsed template: scopes, statements, expression evaluation and the resource guards.
//
// One Interpreter per render call, on the calling thread; it only reads the AST, so a Template
// can be rendered concurrently from several threads. Every failure is a TemplateError that
// carries the position of the innermost expression or statement involved.
//
// Scoping follows jinja2: the template body writes to the root frame; each for-loop iteration,
// macro call and {% with %} gets a fresh frame whose writes do not leak out (that is what
// namespace() is for); a macro's frame sees the frame it was defined in, not its caller's.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/jinja/ast.h"
#include "server/jinja/template.h"
#include "server/jinja/value.h"

namespace deltaserve::jinja {

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : options_(options) {}

  // `context` must be a dict; its keys are the template's top-level variables.
  std::string render(const Body& body, const Value& context);

  // Calls a function value (builtin, bound method, macro); TemplateError if not callable.
  Value call(const Value& callee, CallArgs& args);
  // jinja2's getattr (obj.name: attribute, then item) and getitem (obj[key]: item, then
  // attribute); a miss is an undefined value carrying jinja2's message.
  Value getattr(const Value& object, const std::string& name);
  Value getitem(const Value& object, const Value& key);
  // Python iter(): list items, dict keys, string characters; undefined iterates as empty.
  std::vector<Value> iterate(const Value& value);

  // Resource guards. tick() charges loop iterations and calls against max_steps;
  // check_size() refuses strings larger than max_output_bytes.
  void tick(uint64_t steps = 1);
  void check_size(size_t bytes) const;
  const RenderOptions& options() const { return options_; }

 private:
  struct Frame {
    std::unordered_map<std::string, Value> vars;
    Frame* parent = nullptr;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  // Statements (interpreter.cpp).
  Flow exec(const Body& body);
  Flow exec_node(const Node& node);
  Flow exec_for(const ForNode& node);
  void exec_set_block(const SetBlockNode& node);
  void exec_call_block(const CallBlockNode& node);
  void exec_filter_block(const FilterBlockNode& node);
  void exec_with(const WithNode& node);
  void write(const std::string& text);
  std::string capture(const Body& body);
  void assign(const Target& target, const Value& value);
  Value make_macro(const MacroNode& macro);
  Value call_macro(const MacroNode& macro, Frame* parent, CallArgs& args);

  // Expressions (evaluate.cpp).
  Value eval(const Expr& expr);
  Value eval_inner(const Expr& expr);
  Value eval_binary(const BinaryExpr& expr);
  Value eval_slice(const SliceExpr& expr);
  Value eval_filter(const FilterExpr& expr);
  CallArgs eval_args(const CallArgExprs& args);
  Value lookup(const std::string& name) const;

  const RenderOptions& options_;
  Frame root_;
  Frame* current_ = &root_;
  const Dict* context_ = nullptr;
  std::string* out_ = nullptr;
  uint64_t num_steps_ = 0;
  size_t num_output_bytes_ = 0;
  int call_depth_ = 0;
  Value filter_block_input_;  // the captured body inside {% filter %} / {% set x | f %}
};

}  // namespace deltaserve::jinja
