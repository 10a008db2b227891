// Tokens -> AST, following jinja2's grammar (parser.py) including its operator precedence:
// filters and tests bind tighter than arithmetic, `not` looser than comparisons, and a test
// takes one bare argument (`x is divisibleby 3`). Unknown tags, filters and tests are syntax
// errors, as in jinja2 where they fail at compile time (see check_filter_and_test_names).
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "server/jinja/ast.h"
#include "server/jinja/lexer.h"

namespace deltaserve::jinja {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  // Throws TemplateError with the offending token's position.
  Body parse_template();

 private:
  // Token stream.
  const Token& peek(size_t ahead = 0) const;
  const Token& next();
  bool at_op(std::string_view op, size_t ahead = 0) const;
  bool at_name(std::string_view name, size_t ahead = 0) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  void expect_op(std::string_view op);
  void expect_block_end();
  std::string expect_name();
  [[noreturn]] void fail(const std::string& message, const Token& at) const;
  static std::string describe(const Token& token);

  // Statements (parser.cpp).
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string_view block,
                  int block_line);
  NodePtr parse_statement();
  NodePtr parse_if(const Token& tag);
  NodePtr parse_for(const Token& tag);
  NodePtr parse_set(const Token& tag);
  NodePtr parse_macro(const Token& tag);
  NodePtr parse_call_block(const Token& tag);
  NodePtr parse_filter_block(const Token& tag);
  NodePtr parse_with(const Token& tag);
  Target parse_assign_target(bool with_namespace);
  std::vector<MacroParam> parse_params();
  void parse_macro_body(MacroNode& macro, std::string_view end_tag, int line);
  void expect_end_tag(std::string_view name);

  // Expressions (parser_expr.cpp).
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens,
                      std::initializer_list<std::string_view> extra_end_names = {});
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  CallArgExprs parse_call_args();
  std::string parse_dotted_name();
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end_names) const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int expr_depth_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::set<std::string>> macro_refs_;  // names each open macro body mentions
  struct OpenBlock {
    std::string name;
    int line;
    std::string end_tags;  // "'elif' or 'else' or 'endif'"
  };
  std::vector<OpenBlock> open_blocks_;  // for "unknown tag" messages inside a block
};

// Throws TemplateError for filters/tests that do not exist, except where jinja2 defers the check
// to render time (inside if blocks and inline if-expressions). Run on a parsed template.
void check_filter_and_test_names(const Body& body);

// Nesting limits that keep the recursive-descent parser (and the evaluator) off the stack's edge.
inline constexpr int kMaxExprDepth = 200;
inline constexpr int kMaxBlockDepth = 200;

}  // namespace deltaserve::jinja
