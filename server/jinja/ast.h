// The parsed form of a template: expressions and statements, as jinja2's parser builds them.
// Nodes are immutable after parsing and owned by the Template; rendering only reads them, so
// one parsed template serves concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/jinja/value.h"

namespace deltaserve::jinja {

struct Expr {
  enum class Kind {
    kLiteral, kName, kList, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest, kUnary,
    kBinary, kCond
  };
  Expr(Kind k, int l, int c) : kind(k), line(l), column(c) {}
  virtual ~Expr() = default;
  Kind kind;
  int line;
  int column;
};
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(Value v, int l, int c) : Expr(Kind::kLiteral, l, c), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(std::string n, int l, int c) : Expr(Kind::kName, l, c), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(bool tuple, int l, int c) : Expr(Kind::kList, l, c), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};
struct DictExpr : Expr {
  DictExpr(int l, int c) : Expr(Kind::kDict, l, c) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetAttrExpr : Expr {  // obj.name: attribute first, then item (jinja2's getattr)
  GetAttrExpr(ExprPtr o, std::string n, int l, int c)
      : Expr(Kind::kGetAttr, l, c), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct GetItemExpr : Expr {  // obj[index]: item first, then attribute (jinja2's getitem)
  GetItemExpr(ExprPtr o, ExprPtr i, int l, int c)
      : Expr(Kind::kGetItem, l, c), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr : Expr {  // obj[start:stop:step], each part optional
  SliceExpr(ExprPtr o, int l, int c) : Expr(Kind::kSlice, l, c), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};
struct CallExpr : Expr {
  CallExpr(ExprPtr f, int l, int c) : Expr(Kind::kCall, l, c), callee(std::move(f)) {}
  ExprPtr callee;
  CallArgExprs args;
};
struct FilterExpr : Expr {  // input | name(args); input is null inside {% filter %} blocks
  FilterExpr(ExprPtr in, std::string n, int l, int c)
      : Expr(Kind::kFilter, l, c), input(std::move(in)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  CallArgExprs args;
};
struct TestExpr : Expr {  // input is [not] name(args)
  TestExpr(ExprPtr in, std::string n, int l, int c)
      : Expr(Kind::kTest, l, c), input(std::move(in)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  CallArgExprs args;
  bool negated = false;
};
struct UnaryExpr : Expr {
  enum class Op { kNot, kNeg, kPos };
  UnaryExpr(Op o, ExprPtr x, int l, int c) : Expr(Kind::kUnary, l, c), op(o), operand(std::move(x)) {}
  Op op;
  ExprPtr operand;
};
struct BinaryExpr : Expr {
  enum class Op {
    kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kEq, kNe, kLt, kLe, kGt, kGe, kIn,
    kNotIn, kAnd, kOr
  };
  BinaryExpr(Op o, ExprPtr a, ExprPtr b, int l, int c)
      : Expr(Kind::kBinary, l, c), op(o), lhs(std::move(a)), rhs(std::move(b)) {}
  Op op;
  ExprPtr lhs, rhs;
};
struct CondExpr : Expr {  // then if cond else otherwise; otherwise may be null (-> undefined)
  CondExpr(int l, int c) : Expr(Kind::kCond, l, c) {}
  ExprPtr cond, then, otherwise;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// Where {% set %} and {% for %} store values: one name, a tuple of names, or ns.attr.
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string ns_attr;  // non-empty: names[0].ns_attr = value (namespace assignment)
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  enum class Kind {
    kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith, kBreak,
    kContinue, kScope
  };
  Node(Kind k, int l, int c) : kind(k), line(l), column(c) {}
  virtual ~Node() = default;
  Kind kind;
  int line;
  int column;
};

struct TextNode : Node {
  TextNode(std::string t, int l, int c) : Node(Kind::kText, l, c), text(std::move(t)) {}
  std::string text;
};
struct OutputNode : Node {
  OutputNode(ExprPtr e, int l, int c) : Node(Kind::kOutput, l, c), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfNode : Node {
  IfNode(int l, int c) : Node(Kind::kIf, l, c) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};
struct ForNode : Node {
  ForNode(int l, int c) : Node(Kind::kFor, l, c) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // {% for x in y if cond %}; may be null
  Body body;
  Body else_body;
};
struct SetNode : Node {
  SetNode(int l, int c) : Node(Kind::kSet, l, c) {}
  Target target;
  ExprPtr value;
};
struct SetBlockNode : Node {  // {% set x | filters %}body{% endset %}
  SetBlockNode(int l, int c) : Node(Kind::kSetBlock, l, c) {}
  Target target;
  std::vector<ExprPtr> filters;  // FilterExpr with null input, applied in order
  Body body;
};
struct MacroNode : Node {
  MacroNode(int l, int c) : Node(Kind::kMacro, l, c) {}
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  bool uses_caller = false;   // jinja2 only accepts caller= when the body mentions it
  bool uses_varargs = false;  // extra positional arguments go to `varargs`
  bool uses_kwargs = false;   // extra keyword arguments go to `kwargs`
};
struct CallBlockNode : Node {  // {% call(params) macro(args) %}body{% endcall %}
  CallBlockNode(int l, int c) : Node(Kind::kCallBlock, l, c) {}
  ExprPtr call;                 // a CallExpr
  std::shared_ptr<MacroNode> caller;  // the body as an anonymous macro named "caller"
};
struct FilterBlockNode : Node {
  FilterBlockNode(int l, int c) : Node(Kind::kFilterBlock, l, c) {}
  std::vector<ExprPtr> filters;
  Body body;
};
struct WithNode : Node {
  WithNode(int l, int c) : Node(Kind::kWith, l, c) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};
struct ScopeNode : Node {  // a body rendered as is: transformers' {% generation %}
  ScopeNode(int l, int c) : Node(Kind::kScope, l, c) {}
  Body body;
};
struct LoopControlNode : Node {  // {% break %} / {% continue %}
  LoopControlNode(Kind k, int l, int c) : Node(k, l, c) {}
};

}  // namespace deltaserve::jinja
