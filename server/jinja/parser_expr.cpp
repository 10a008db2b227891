// Expression half of the Parser: jinja2's parse_tuple .. parse_primary, same precedence.
#include <cstdlib>

#include "server/jinja/builtins.h"
#include "server/jinja/parser.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

struct DepthGuard {
  DepthGuard(int& depth, const Token& at) : depth_(depth) {
    if (++depth_ > kMaxExprDepth) {
      throw TemplateError("expression nested deeper than " + std::to_string(kMaxExprDepth) +
                              " levels", at.line, at.column);
    }
  }
  ~DepthGuard() { --depth_; }
  int& depth_;
};

}  // namespace

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra_end_names) const {
  const Token& t = peek();
  if (t.type == Token::Type::kVarEnd || t.type == Token::Type::kBlockEnd || at_op(")")) return true;
  for (std::string_view name : extra_end_names) {
    if (at_name(name)) return true;
  }
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens,
                            std::initializer_list<std::string_view> extra_end_names) {
  const Token& start = peek();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end_names)) break;
    items.push_back(parse_expression(with_condexpr));
    if (at_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail("expected an expression, got " + describe(peek()), peek());
  }
  auto tuple = std::make_unique<ListExpr>(true, start.line, start.column);
  tuple->items = std::move(items);
  return tuple;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr expr = parse_or();
  while (at_name("if")) {
    const Token& tag = next();
    auto cond = std::make_unique<CondExpr>(tag.line, tag.column);
    cond->then = std::move(expr);
    cond->cond = parse_or();
    if (skip_name("else")) cond->otherwise = parse_condexpr();
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (at_name("or")) {
    const Token& op = next();
    left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kOr, std::move(left), parse_and(), op.line,
                                        op.column);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (at_name("and")) {
    const Token& op = next();
    left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kAnd, std::move(left), parse_not(),
                                        op.line, op.column);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (at_name("not")) {
    const Token& op = next();
    DepthGuard guard(expr_depth_, op);
    return std::make_unique<UnaryExpr>(UnaryExpr::Op::kNot, parse_not(), op.line, op.column);
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  ExprPtr left = parse_math1();
  bool compared = false;
  while (true) {
    const Token& op = peek();
    BinaryExpr::Op kind;
    if (op.type == Token::Type::kOp && (op.value == "==" || op.value == "!=" || op.value == "<" ||
                                        op.value == "<=" || op.value == ">" || op.value == ">=")) {
      kind = op.value == "==" ? BinaryExpr::Op::kEq
             : op.value == "!=" ? BinaryExpr::Op::kNe
             : op.value == "<"  ? BinaryExpr::Op::kLt
             : op.value == "<=" ? BinaryExpr::Op::kLe
             : op.value == ">"  ? BinaryExpr::Op::kGt
                                : BinaryExpr::Op::kGe;
      next();
    } else if (at_name("in")) {
      kind = BinaryExpr::Op::kIn;
      next();
    } else if (at_name("not") && at_name("in", 1)) {
      kind = BinaryExpr::Op::kNotIn;
      next();
      next();
    } else {
      break;
    }
    if (compared) fail("chained comparisons (a < b < c) are not supported", op);
    compared = true;
    left = std::make_unique<BinaryExpr>(kind, std::move(left), parse_math1(), op.line, op.column);
  }
  return left;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    const Token& op = next();
    auto kind = op.value == "+" ? BinaryExpr::Op::kAdd : BinaryExpr::Op::kSub;
    left = std::make_unique<BinaryExpr>(kind, std::move(left), parse_concat(), op.line, op.column);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (at_op("~")) {
    const Token& op = next();
    left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kConcat, std::move(left), parse_math2(),
                                        op.line, op.column);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const Token& op = next();
    auto kind = op.value == "*"    ? BinaryExpr::Op::kMul
                : op.value == "/"  ? BinaryExpr::Op::kDiv
                : op.value == "//" ? BinaryExpr::Op::kFloorDiv
                                   : BinaryExpr::Op::kMod;
    left = std::make_unique<BinaryExpr>(kind, std::move(left), parse_pow(), op.line, op.column);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (at_op("**")) {
    const Token& op = next();
    left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kPow, std::move(left), parse_unary(true),
                                        op.line, op.column);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const Token& start = peek();
  DepthGuard guard(expr_depth_, start);
  ExprPtr node;
  if (at_op("-") || at_op("+")) {
    next();
    auto op = start.value == "-" ? UnaryExpr::Op::kNeg : UnaryExpr::Op::kPos;
    node = std::make_unique<UnaryExpr>(op, parse_unary(false), start.line, start.column);
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& token = peek();
  switch (token.type) {
    case Token::Type::kName: {
      next();
      const std::string& v = token.value;
      if (v == "true" || v == "True") return std::make_unique<LiteralExpr>(Value::boolean(true), token.line, token.column);
      if (v == "false" || v == "False") return std::make_unique<LiteralExpr>(Value::boolean(false), token.line, token.column);
      if (v == "none" || v == "None") return std::make_unique<LiteralExpr>(Value::none(), token.line, token.column);
      if (!macro_refs_.empty()) macro_refs_.back().insert(v);
      return std::make_unique<NameExpr>(v, token.line, token.column);
    }
    case Token::Type::kString: {
      std::string text = next().value;
      while (peek().type == Token::Type::kString) text += next().value;  // 'a' 'b' == 'ab'
      return std::make_unique<LiteralExpr>(Value::string(std::move(text)), token.line, token.column);
    }
    case Token::Type::kInt: {
      next();
      errno = 0;
      long long v = std::strtoll(token.value.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal out of range", token);
      return std::make_unique<LiteralExpr>(Value::integer(v), token.line, token.column);
    }
    case Token::Type::kFloat:
      next();
      return std::make_unique<LiteralExpr>(Value::number(std::strtod(token.value.c_str(), nullptr)),
                                           token.line, token.column);
    case Token::Type::kOp:
      if (token.value == "(") {
        next();
        ExprPtr inner = parse_tuple(true, true);
        expect_op(")");
        return inner;
      }
      if (token.value == "[") {
        next();
        auto list = std::make_unique<ListExpr>(false, token.line, token.column);
        while (!at_op("]")) {
          if (!list->items.empty()) expect_op(",");
          if (at_op("]")) break;
          list->items.push_back(parse_expression());
        }
        expect_op("]");
        return list;
      }
      if (token.value == "{") {
        next();
        auto dict = std::make_unique<DictExpr>(token.line, token.column);
        while (!at_op("}")) {
          if (!dict->items.empty()) expect_op(",");
          if (at_op("}")) break;
          ExprPtr key = parse_expression();
          expect_op(":");
          dict->items.emplace_back(std::move(key), parse_expression());
        }
        expect_op("}");
        return dict;
      }
      break;
    default: break;
  }
  fail("unexpected " + describe(token), token);
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (at_op(".") || at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      const Token& paren = peek();
      auto call = std::make_unique<CallExpr>(std::move(node), paren.line, paren.column);
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& token = next();
  if (token.value == ".") {
    const Token& attr = next();
    if (attr.type == Token::Type::kName) {
      return std::make_unique<GetAttrExpr>(std::move(node), attr.value, token.line, token.column);
    }
    if (attr.type == Token::Type::kInt) {
      auto index = std::make_unique<LiteralExpr>(
          Value::integer(std::strtoll(attr.value.c_str(), nullptr, 10)), attr.line, attr.column);
      return std::make_unique<GetItemExpr>(std::move(node), std::move(index), token.line,
                                           token.column);
    }
    fail("expected an attribute name after '.', got " + describe(attr), attr);
  }
  // '[': an index or a slice [start:stop:step]
  ExprPtr parts[3];
  bool is_slice = false;
  int part = 0;
  while (true) {
    if (at_op(":")) {
      next();
      is_slice = true;
      if (++part > 2) fail("too many ':' in slice", token);
      continue;
    }
    if (at_op("]")) break;
    if (parts[part]) fail("expected ']' or ':', got " + describe(peek()), peek());
    parts[part] = parse_expression();
    if (at_op(",")) fail("multi-dimensional subscripts are not supported", peek());
  }
  expect_op("]");
  if (!is_slice) {
    if (!parts[0]) fail("empty subscript '[]'", token);
    return std::make_unique<GetItemExpr>(std::move(node), std::move(parts[0]), token.line,
                                         token.column);
  }
  auto slice = std::make_unique<SliceExpr>(std::move(node), token.line, token.column);
  slice->start = std::move(parts[0]);
  slice->stop = std::move(parts[1]);
  slice->step = std::move(parts[2]);
  return slice;
}

CallArgExprs Parser::parse_call_args() {
  CallArgExprs args;
  expect_op("(");
  while (!at_op(")")) {
    if (!args.positional.empty() || !args.keyword.empty()) {
      expect_op(",");
      if (at_op(")")) break;
    }
    if (at_op("*") || at_op("**")) fail("*args / **kwargs in calls are not supported", peek());
    if (peek().type == Token::Type::kName && at_op("=", 1)) {
      std::string key = next().value;
      next();
      args.keyword.emplace_back(std::move(key), parse_expression());
    } else {
      if (!args.keyword.empty()) fail("positional argument follows keyword argument", peek());
      args.positional.push_back(parse_expression());
    }
  }
  expect_op(")");
  return args;
}

std::string Parser::parse_dotted_name() {
  std::string name = expect_name();
  while (at_op(".") && peek(1).type == Token::Type::kName) {
    next();
    name += "." + next().value;
  }
  return name;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (at_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      const Token& paren = peek();
      auto call = std::make_unique<CallExpr>(std::move(node), paren.line, paren.column);
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (at_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& name_token = peek();
    std::string name = parse_dotted_name();
    auto filter = std::make_unique<FilterExpr>(std::move(node), name, name_token.line,
                                               name_token.column);
    if (at_op("(")) filter->args = parse_call_args();
    node = std::move(filter);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  next();  // 'is'
  bool negated = skip_name("not");
  const Token& name_token = peek();
  std::string name = parse_dotted_name();
  auto test = std::make_unique<TestExpr>(std::move(node), name, name_token.line, name_token.column);
  test->negated = negated;
  const Token& t = peek();
  if (at_op("(")) {
    test->args = parse_call_args();
  } else if ((t.type == Token::Type::kName || t.type == Token::Type::kString ||
              t.type == Token::Type::kInt || t.type == Token::Type::kFloat || at_op("[") ||
              at_op("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) fail("you cannot chain multiple tests with 'is'", t);
    test->args.positional.push_back(parse_postfix(parse_primary()));
  }
  return test;
}

}  // namespace deltaserve::jinja
