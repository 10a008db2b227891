#include "server/jinja/parser.h"

#include <algorithm>

#include "server/jinja/builtins.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {

const Token& Parser::peek(size_t ahead) const {
  return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

const Token& Parser::next() {
  const Token& token = peek();
  if (pos_ < tokens_.size() - 1) ++pos_;
  return token;
}

bool Parser::at_op(std::string_view op, size_t ahead) const {
  const Token& t = peek(ahead);
  return t.type == Token::Type::kOp && t.value == op;
}

bool Parser::at_name(std::string_view name, size_t ahead) const {
  const Token& t = peek(ahead);
  return t.type == Token::Type::kName && t.value == name;
}

bool Parser::skip_op(std::string_view op) {
  if (!at_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view name) {
  if (!at_name(name)) return false;
  next();
  return true;
}

void Parser::expect_op(std::string_view op) {
  if (!at_op(op)) fail("expected '" + std::string(op) + "', got " + describe(peek()), peek());
  next();
}

void Parser::expect_block_end() {
  if (peek().type != Token::Type::kBlockEnd) {
    fail("expected end of statement block '%}', got " + describe(peek()), peek());
  }
  next();
}

std::string Parser::expect_name() {
  if (peek().type != Token::Type::kName) fail("expected a name, got " + describe(peek()), peek());
  return next().value;
}

void Parser::fail(const std::string& message, const Token& at) const {
  throw TemplateError(message, at.line, at.column);
}

std::string Parser::describe(const Token& token) {
  switch (token.type) {
    case Token::Type::kText: return "template text";
    case Token::Type::kVarBegin: return "'{{'";
    case Token::Type::kVarEnd: return "end of print statement '}}'";
    case Token::Type::kBlockBegin: return "'{%'";
    case Token::Type::kBlockEnd: return "end of statement block '%}'";
    case Token::Type::kName: return "'" + token.value + "'";
    case Token::Type::kString: return "string literal";
    case Token::Type::kInt:
    case Token::Type::kFloat: return "number " + token.value;
    case Token::Type::kOp: return "'" + token.value + "'";
    case Token::Type::kEof: return "end of template";
  }
  return "token";
}

Body Parser::parse_template() {
  Body body = parse_body({}, "", 0);
  check_filter_and_test_names(body);
  return body;
}

// Parses nodes until a {% tag %} named in end_tags (left unconsumed, just after its '{%'), or
// the end of the template when end_tags is empty.
Body Parser::parse_body(std::initializer_list<std::string_view> end_tags, std::string_view block,
                        int block_line) {
  if (++block_depth_ > kMaxBlockDepth) {
    fail("blocks are nested deeper than " + std::to_string(kMaxBlockDepth) + " levels", peek());
  }
  Body body;
  std::string wanted;
  for (std::string_view tag : end_tags) {
    wanted += (wanted.empty() ? "'" : " or '") + std::string(tag) + "'";
  }
  if (end_tags.size() > 0) open_blocks_.push_back({std::string(block), block_line, wanted});
  while (true) {
    const Token& token = peek();
    if (token.type == Token::Type::kEof) {
      if (end_tags.size() == 0) break;
      fail("unexpected end of template: the '" + std::string(block) + "' block opened at line " +
               std::to_string(block_line) + " is never closed (looking for " + wanted + ")",
           token);
    }
    if (token.type == Token::Type::kText) {
      body.push_back(std::make_unique<TextNode>(token.value, token.line, token.column));
      next();
    } else if (token.type == Token::Type::kVarBegin) {
      next();
      ExprPtr expr = parse_tuple(true, false);
      if (peek().type != Token::Type::kVarEnd) {
        fail("expected end of print statement '}}', got " + describe(peek()), peek());
      }
      next();
      body.push_back(std::make_unique<OutputNode>(std::move(expr), token.line, token.column));
    } else if (token.type == Token::Type::kBlockBegin) {
      const Token& name = peek(1);
      if (name.type == Token::Type::kName &&
          std::find(end_tags.begin(), end_tags.end(), name.value) != end_tags.end()) {
        next();
        break;
      }
      next();
      body.push_back(parse_statement());
    } else {
      fail("unexpected " + describe(token), token);
    }
  }
  if (end_tags.size() > 0) open_blocks_.pop_back();
  --block_depth_;
  return body;
}

void Parser::expect_end_tag(std::string_view name) {
  if (!at_name(name)) fail("expected '" + std::string(name) + "', got " + describe(peek()), peek());
  next();
  expect_block_end();
}

NodePtr Parser::parse_statement() {
  const Token& tag = peek();
  if (tag.type != Token::Type::kName) fail("expected a tag name, got " + describe(tag), tag);
  const std::string name = next().value;
  if (name == "if") return parse_if(tag);
  if (name == "for") return parse_for(tag);
  if (name == "set") return parse_set(tag);
  if (name == "macro") return parse_macro(tag);
  if (name == "call") return parse_call_block(tag);
  if (name == "filter") return parse_filter_block(tag);
  if (name == "with") return parse_with(tag);
  if (name == "generation") {  // transformers' AssistantTracker tag: renders its body as is
    auto node = std::make_unique<ScopeNode>(tag.line, tag.column);
    expect_block_end();
    node->body = parse_body({"endgeneration"}, "generation", tag.line);
    expect_end_tag("endgeneration");
    return node;
  }
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail("'" + name + "' outside of a loop", tag);
    expect_block_end();
    return std::make_unique<LoopControlNode>(
        name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, tag.line, tag.column);
  }
  if (name == "include" || name == "import" || name == "from" || name == "extends" ||
      name == "block") {
    fail("tag '" + name + "' is not supported: chat templates render standalone", tag);
  }
  std::string message = "encountered unknown tag '" + name + "'";
  if (!open_blocks_.empty()) {
    const OpenBlock& open = open_blocks_.back();
    message += "; the innermost open block is '" + open.name + "' (line " +
               std::to_string(open.line) + "), which expects " + open.end_tags;
  }
  fail(message, tag);
}

NodePtr Parser::parse_if(const Token& tag) {
  auto node = std::make_unique<IfNode>(tag.line, tag.column);
  ExprPtr cond = parse_tuple(false, false);
  expect_block_end();
  while (true) {
    Body body = parse_body({"elif", "else", "endif"}, "if", tag.line);
    node->branches.emplace_back(std::move(cond), std::move(body));
    std::string end = next().value;
    if (end == "elif") {
      cond = parse_tuple(false, false);
      expect_block_end();
      continue;
    }
    if (end == "else") {
      expect_block_end();
      node->else_body = parse_body({"endif"}, "if", tag.line);
      next();
    }
    expect_block_end();
    return node;
  }
}

NodePtr Parser::parse_for(const Token& tag) {
  auto node = std::make_unique<ForNode>(tag.line, tag.column);
  node->target = parse_assign_target(false);
  if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(peek()), peek());
  node->iter = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) node->filter = parse_expression();
  if (at_name("recursive")) fail("recursive for loops are not supported", peek());
  expect_block_end();
  ++loop_depth_;
  node->body = parse_body({"endfor", "else"}, "for", tag.line);
  --loop_depth_;
  if (next().value == "else") {
    expect_block_end();
    node->else_body = parse_body({"endfor"}, "for", tag.line);
    next();
  }
  expect_block_end();
  return node;
}

NodePtr Parser::parse_set(const Token& tag) {
  Target target = parse_assign_target(true);
  if (skip_op("=")) {
    auto node = std::make_unique<SetNode>(tag.line, tag.column);
    node->target = std::move(target);
    node->value = parse_tuple(true, false);
    expect_block_end();
    return node;
  }
  auto node = std::make_unique<SetBlockNode>(tag.line, tag.column);
  node->target = std::move(target);
  if (at_op("|")) node->filters.push_back(parse_filter(nullptr, false));
  expect_block_end();
  node->body = parse_body({"endset"}, "set", tag.line);
  expect_end_tag("endset");
  return node;
}

Target Parser::parse_assign_target(bool with_namespace) {
  Target target;
  if (with_namespace && peek().type == Token::Type::kName && at_op(".", 1)) {
    target.names.push_back(next().value);
    next();
    target.ns_attr = expect_name();
    return target;
  }
  bool parens = skip_op("(");
  while (true) {
    target.names.push_back(expect_name());
    if (!skip_op(",")) break;
    target.is_tuple = true;
    if (peek().type != Token::Type::kName) break;  // trailing comma
  }
  if (parens) {
    expect_op(")");
    target.is_tuple = true;
  }
  static const std::set<std::string> kReserved = {"true", "false", "none", "True", "False",
                                                  "None", "loop"};
  for (const std::string& name : target.names) {
    if (kReserved.count(name) && name != "loop") fail("cannot assign to '" + name + "'", peek());
  }
  return target;
}

std::vector<MacroParam> Parser::parse_params() {
  std::vector<MacroParam> params;
  expect_op("(");
  while (!at_op(")")) {
    if (!params.empty()) expect_op(",");
    MacroParam param;
    param.name = expect_name();
    if (skip_op("=")) {
      param.default_value = parse_expression();
    } else if (!params.empty() && params.back().default_value) {
      fail("non-default argument '" + param.name + "' follows default argument", peek());
    }
    params.push_back(std::move(param));
  }
  expect_op(")");
  return params;
}

void Parser::parse_macro_body(MacroNode& macro, std::string_view end_tag, int line) {
  macro_refs_.emplace_back();
  int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  macro.body = parse_body({end_tag}, end_tag.substr(3), line);
  loop_depth_ = saved_loop_depth;
  const std::set<std::string>& refs = macro_refs_.back();
  macro.uses_caller = refs.count("caller") > 0;
  macro.uses_varargs = refs.count("varargs") > 0;
  macro.uses_kwargs = refs.count("kwargs") > 0;
  macro_refs_.pop_back();
  next();  // the end tag's name
  expect_block_end();
}

NodePtr Parser::parse_macro(const Token& tag) {
  auto node = std::make_unique<MacroNode>(tag.line, tag.column);
  node->name = expect_name();
  node->params = parse_params();
  expect_block_end();
  parse_macro_body(*node, "endmacro", tag.line);
  return node;
}

NodePtr Parser::parse_call_block(const Token& tag) {
  auto node = std::make_unique<CallBlockNode>(tag.line, tag.column);
  node->caller = std::make_shared<MacroNode>(tag.line, tag.column);
  node->caller->name = "caller";
  if (at_op("(")) node->caller->params = parse_params();
  node->call = parse_expression();
  if (node->call->kind != Expr::Kind::kCall) fail("expected a macro call after 'call'", tag);
  expect_block_end();
  parse_macro_body(*node->caller, "endcall", tag.line);
  return node;
}

NodePtr Parser::parse_filter_block(const Token& tag) {
  auto node = std::make_unique<FilterBlockNode>(tag.line, tag.column);
  node->filters.push_back(parse_filter(nullptr, true));
  expect_block_end();
  node->body = parse_body({"endfilter"}, "filter", tag.line);
  expect_end_tag("endfilter");
  return node;
}

NodePtr Parser::parse_with(const Token& tag) {
  auto node = std::make_unique<WithNode>(tag.line, tag.column);
  while (peek().type != Token::Type::kBlockEnd) {
    if (!node->assignments.empty()) expect_op(",");
    Target target = parse_assign_target(false);
    expect_op("=");
    node->assignments.emplace_back(std::move(target), parse_expression());
  }
  expect_block_end();
  node->body = parse_body({"endwith"}, "with", tag.line);
  expect_end_tag("endwith");
  return node;
}

}  // namespace deltaserve::jinja
