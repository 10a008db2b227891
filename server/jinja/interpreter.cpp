#include "server/jinja/interpreter.h"

#include <memory>

#include "server/jinja/builtins.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

// Adds the position of `node` to errors raised below it that have none yet.
template <typename Fn>
auto with_position(int line, int column, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const TemplateError& e) {
    if (e.line() > 0) throw;
    throw TemplateError(e.message(), line, column);
  }
}

}  // namespace

std::string Interpreter::render(const Body& body, const Value& context) {
  context_ = &context.dict();
  std::string out;
  out_ = &out;
  exec(body);
  return out;
}

void Interpreter::tick(uint64_t steps) {
  num_steps_ += steps;
  if (num_steps_ > options_.max_steps) {
    throw TemplateError("template exceeded its step budget (" +
                        std::to_string(options_.max_steps) + " loop iterations/calls)");
  }
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > options_.max_output_bytes) {
    throw TemplateError("template output exceeds the limit of " +
                        std::to_string(options_.max_output_bytes) + " bytes");
  }
}

void Interpreter::write(const std::string& text) {
  num_output_bytes_ += text.size();
  check_size(num_output_bytes_);
  *out_ += text;
}

std::string Interpreter::capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const NodePtr& node : body) {
    Flow flow = with_position(node->line, node->column, [&] { return exec_node(*node); });
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_node(const Node& node) {
  tick();
  switch (node.kind) {
    case Node::Kind::kText: write(static_cast<const TextNode&>(node).text); return Flow::kNormal;
    case Node::Kind::kOutput:
      write(eval(*static_cast<const OutputNode&>(node).expr).to_str());
      return Flow::kNormal;
    case Node::Kind::kIf: {
      const auto& n = static_cast<const IfNode&>(node);
      for (const auto& [cond, body] : n.branches) {
        if (eval(*cond).truthy()) return exec(body);
      }
      return exec(n.else_body);
    }
    case Node::Kind::kFor: return exec_for(static_cast<const ForNode&>(node));
    case Node::Kind::kSet: {
      const auto& n = static_cast<const SetNode&>(node);
      assign(n.target, eval(*n.value));
      return Flow::kNormal;
    }
    case Node::Kind::kSetBlock: exec_set_block(static_cast<const SetBlockNode&>(node)); return Flow::kNormal;
    case Node::Kind::kMacro: {
      const auto& n = static_cast<const MacroNode&>(node);
      current_->vars[n.name] = make_macro(n);
      return Flow::kNormal;
    }
    case Node::Kind::kCallBlock: exec_call_block(static_cast<const CallBlockNode&>(node)); return Flow::kNormal;
    case Node::Kind::kFilterBlock: exec_filter_block(static_cast<const FilterBlockNode&>(node)); return Flow::kNormal;
    case Node::Kind::kWith: exec_with(static_cast<const WithNode&>(node)); return Flow::kNormal;
    case Node::Kind::kScope: {
      // transformers renders {% generation %} bodies as a caller(): writes stay inside.
      Frame frame{{}, current_};
      current_ = &frame;
      Flow flow;
      try {
        flow = exec(static_cast<const ScopeNode&>(node).body);
      } catch (...) {
        current_ = frame.parent;
        throw;
      }
      current_ = frame.parent;
      return flow;
    }
    case Node::Kind::kBreak: return Flow::kBreak;
    case Node::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const ForNode& node) {
  Value iterable = eval(*node.iter);
  std::vector<Value> items = iterate(iterable);
  tick(items.size());
  if (node.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      Frame frame{{}, current_};
      current_ = &frame;
      bool keep;
      try {
        assign(node.target, item);
        keep = eval(*node.filter).truthy();
      } catch (...) {
        current_ = frame.parent;
        throw;
      }
      current_ = frame.parent;
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(node.else_body);
    return Flow::kNormal;
  }
  auto index0 = std::make_shared<int64_t>(0);
  Value cycle = Value::function("loop.cycle", [index0](Interpreter&, CallArgs& args) {
    if (args.positional.empty()) throw TemplateError("no items for cycling given");
    return args.positional[static_cast<size_t>(*index0) % args.positional.size()];
  });
  const int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    tick();
    *index0 = i;
    Dict loop;
    loop.items.reserve(12);
    loop.items.emplace_back("index0", Value::integer(i));
    loop.items.emplace_back("index", Value::integer(i + 1));
    loop.items.emplace_back("revindex0", Value::integer(length - i - 1));
    loop.items.emplace_back("revindex", Value::integer(length - i));
    loop.items.emplace_back("first", Value::boolean(i == 0));
    loop.items.emplace_back("last", Value::boolean(i == length - 1));
    loop.items.emplace_back("length", Value::integer(length));
    loop.items.emplace_back("depth0", Value::integer(0));
    loop.items.emplace_back("depth", Value::integer(1));
    loop.items.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i) - 1]
                                              : Value::undefined("there is no previous item"));
    loop.items.emplace_back("nextitem", i + 1 < length ? items[static_cast<size_t>(i) + 1]
                                                       : Value::undefined("there is no next item"));
    loop.items.emplace_back("cycle", cycle);
    Frame frame{{}, current_};
    current_ = &frame;
    Flow flow;
    try {
      frame.vars["loop"] = Value::dict(std::move(loop));
      assign(node.target, items[static_cast<size_t>(i)]);
      flow = exec(node.body);
    } catch (...) {
      current_ = frame.parent;
      throw;
    }
    current_ = frame.parent;
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Target& target, const Value& value) {
  if (!target.ns_attr.empty()) {
    Value ns = lookup(target.names[0]);
    if (!ns.is_namespace()) {
      throw TemplateError("cannot assign attribute '" + target.ns_attr + "' on '" +
                          target.names[0] + "': it is not a namespace()");
    }
    if (value.holds_ref()) {
      throw TemplateError("a namespace attribute cannot hold namespaces, macros or functions");
    }
    if (value.depth() + 1 > kMaxValueDepth) throw TemplateError("value nesting too deep");
    ns.ns().attrs.set(target.ns_attr, value);
    return;
  }
  if (!target.is_tuple) {
    current_->vars[target.names[0]] = value;
    return;
  }
  std::vector<Value> items = iterate(value);
  if (items.size() != target.names.size()) {
    throw TemplateError(items.size() < target.names.size()
                            ? "not enough values to unpack (expected " +
                                  std::to_string(target.names.size()) + ", got " +
                                  std::to_string(items.size()) + ")"
                            : "too many values to unpack (expected " +
                                  std::to_string(target.names.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) current_->vars[target.names[i]] = items[i];
}

void Interpreter::exec_set_block(const SetBlockNode& node) {
  Value text = Value::string(capture(node.body));
  if (!node.filters.empty()) {
    Value saved = filter_block_input_;
    filter_block_input_ = text;
    text = eval(*node.filters[0]);
    filter_block_input_ = saved;
  }
  assign(node.target, text);
}

void Interpreter::exec_filter_block(const FilterBlockNode& node) {
  Value saved = filter_block_input_;
  filter_block_input_ = Value::string(capture(node.body));
  Value result = eval(*node.filters[0]);
  filter_block_input_ = saved;
  write(result.to_str());
}

void Interpreter::exec_with(const WithNode& node) {
  Frame frame{{}, current_};
  // Values are evaluated in the outer scope, then bound in the new one.
  std::vector<Value> values;
  for (const auto& [target, expr] : node.assignments) values.push_back(eval(*expr));
  current_ = &frame;
  try {
    for (size_t i = 0; i < values.size(); ++i) assign(node.assignments[i].first, values[i]);
    exec(node.body);
  } catch (...) {
    current_ = frame.parent;
    throw;
  }
  current_ = frame.parent;
}

Value Interpreter::make_macro(const MacroNode& macro) {
  const MacroNode* node = &macro;
  Frame* parent = current_;  // outlives the value: macros cannot escape their defining frame
  return Value::function(macro.name, [node, parent](Interpreter& interp, CallArgs& args) {
    return interp.call_macro(*node, parent, args);
  });
}

void Interpreter::exec_call_block(const CallBlockNode& node) {
  const auto& call = static_cast<const CallExpr&>(*node.call);
  Value callee = eval(*call.callee);
  CallArgs args = eval_args(call.args);
  args.keyword.emplace_back("caller", make_macro(*node.caller));
  write(with_position(call.line, call.column, [&] { return this->call(callee, args); }).to_str());
}

Value Interpreter::call_macro(const MacroNode& macro, Frame* parent, CallArgs& args) {
  if (call_depth_ >= options_.max_call_depth) {
    throw TemplateError("macro calls nested deeper than " +
                        std::to_string(options_.max_call_depth) + " levels (runaway recursion?)");
  }
  tick();
  Frame frame{{}, parent};
  const size_t num_params = macro.params.size();
  std::vector<bool> bound(num_params, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < num_params) {
      frame.vars[macro.params[i].name] = args.positional[i];
      bound[i] = true;
    } else if (macro.uses_varargs) {
      varargs.push_back(args.positional[i]);
    } else {
      throw TemplateError("macro '" + macro.name + "' takes not more than " +
                          std::to_string(num_params) + " argument(s)");
    }
  }
  Dict kwargs;
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < num_params && macro.params[i].name != key) ++i;
    if (i < num_params) {
      if (bound[i]) {
        throw TemplateError("macro '" + macro.name + "' got multiple values for argument '" + key + "'");
      }
      frame.vars[key] = value;
      bound[i] = true;
    } else if (key == "caller" && macro.uses_caller) {
      frame.vars["caller"] = value;
    } else if (macro.uses_kwargs) {
      kwargs.set(key, value);
    } else {
      throw TemplateError("macro '" + macro.name + "' takes no keyword argument '" + key + "'");
    }
  }
  Frame* saved_frame = current_;
  std::string* saved_out = out_;
  std::string buffer;
  current_ = &frame;
  out_ = &buffer;
  ++call_depth_;
  try {
    for (size_t i = 0; i < num_params; ++i) {
      if (bound[i]) continue;
      const MacroParam& param = macro.params[i];
      frame.vars[param.name] = param.default_value
                                   ? eval(*param.default_value)
                                   : Value::undefined("parameter '" + param.name +
                                                      "' was not provided");
    }
    if (macro.uses_varargs) frame.vars["varargs"] = Value::list(std::move(varargs), true);
    if (macro.uses_kwargs) frame.vars["kwargs"] = Value::dict(std::move(kwargs));
    if (macro.uses_caller && !frame.vars.count("caller")) {
      frame.vars["caller"] = Value::undefined("No caller defined");
    }
    exec(macro.body);
  } catch (...) {
    --call_depth_;
    current_ = saved_frame;
    out_ = saved_out;
    throw;
  }
  --call_depth_;
  current_ = saved_frame;
  out_ = saved_out;
  return Value::string(std::move(buffer));
}

}  // namespace deltaserve::jinja
