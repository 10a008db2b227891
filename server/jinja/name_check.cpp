// Compile-time check of filter and test names, with jinja2 3.x's exemption: inside an {% if %}
// (condition and body) or an inline if-expression, an unknown name only fails when evaluated,
// so templates can guard optional filters. A new frame (for body, macro, call, set block, with,
// filter block) ends the exemption, exactly as jinja2's compiler does.
#include "server/jinja/builtins.h"
#include "server/jinja/parser.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

void check_expr(const Expr* expr, bool soft);

void check_args(const CallArgExprs& args, bool soft) {
  for (const ExprPtr& arg : args.positional) check_expr(arg.get(), soft);
  for (const auto& [key, arg] : args.keyword) check_expr(arg.get(), soft);
}

void check_expr(const Expr* expr, bool soft) {
  if (expr == nullptr) return;
  switch (expr->kind) {
    case Expr::Kind::kList:
      for (const ExprPtr& item : static_cast<const ListExpr*>(expr)->items) check_expr(item.get(), soft);
      return;
    case Expr::Kind::kDict:
      for (const auto& [k, v] : static_cast<const DictExpr*>(expr)->items) {
        check_expr(k.get(), soft);
        check_expr(v.get(), soft);
      }
      return;
    case Expr::Kind::kGetAttr: check_expr(static_cast<const GetAttrExpr*>(expr)->object.get(), soft); return;
    case Expr::Kind::kGetItem: {
      const auto* e = static_cast<const GetItemExpr*>(expr);
      check_expr(e->object.get(), soft);
      check_expr(e->index.get(), soft);
      return;
    }
    case Expr::Kind::kSlice: {
      const auto* e = static_cast<const SliceExpr*>(expr);
      for (const Expr* part : {e->object.get(), e->start.get(), e->stop.get(), e->step.get()}) {
        check_expr(part, soft);
      }
      return;
    }
    case Expr::Kind::kCall: {
      const auto* e = static_cast<const CallExpr*>(expr);
      check_expr(e->callee.get(), soft);
      check_args(e->args, soft);
      return;
    }
    case Expr::Kind::kFilter: {
      const auto* e = static_cast<const FilterExpr*>(expr);
      if (!soft && !is_known_filter(e->name)) {
        throw TemplateError("no filter named '" + e->name + "'", e->line, e->column);
      }
      check_expr(e->input.get(), soft);
      check_args(e->args, soft);
      return;
    }
    case Expr::Kind::kTest: {
      const auto* e = static_cast<const TestExpr*>(expr);
      if (!soft && !is_known_test(e->name)) {
        throw TemplateError("no test named '" + e->name + "'", e->line, e->column);
      }
      check_expr(e->input.get(), soft);
      check_args(e->args, soft);
      return;
    }
    case Expr::Kind::kUnary: check_expr(static_cast<const UnaryExpr*>(expr)->operand.get(), soft); return;
    case Expr::Kind::kBinary: {
      const auto* e = static_cast<const BinaryExpr*>(expr);
      check_expr(e->lhs.get(), soft);
      check_expr(e->rhs.get(), soft);
      return;
    }
    case Expr::Kind::kCond: {
      const auto* e = static_cast<const CondExpr*>(expr);
      for (const Expr* part : {e->cond.get(), e->then.get(), e->otherwise.get()}) check_expr(part, true);
      return;
    }
    default: return;
  }
}

void check_body(const Body& body, bool soft) {
  for (const NodePtr& node : body) {
    switch (node->kind) {
      case Node::Kind::kOutput: check_expr(static_cast<const OutputNode&>(*node).expr.get(), soft); break;
      case Node::Kind::kIf: {
        const auto& n = static_cast<const IfNode&>(*node);
        for (const auto& [cond, branch] : n.branches) {
          check_expr(cond.get(), true);
          check_body(branch, true);
        }
        check_body(n.else_body, true);
        break;
      }
      case Node::Kind::kFor: {
        const auto& n = static_cast<const ForNode&>(*node);
        check_expr(n.iter.get(), soft);
        check_expr(n.filter.get(), soft);
        check_body(n.body, false);
        check_body(n.else_body, false);
        break;
      }
      case Node::Kind::kSet: check_expr(static_cast<const SetNode&>(*node).value.get(), soft); break;
      case Node::Kind::kSetBlock: {
        const auto& n = static_cast<const SetBlockNode&>(*node);
        for (const ExprPtr& f : n.filters) check_expr(f.get(), false);
        check_body(n.body, false);
        break;
      }
      case Node::Kind::kMacro: {
        const auto& n = static_cast<const MacroNode&>(*node);
        for (const MacroParam& p : n.params) check_expr(p.default_value.get(), false);
        check_body(n.body, false);
        break;
      }
      case Node::Kind::kCallBlock: {
        const auto& n = static_cast<const CallBlockNode&>(*node);
        check_expr(n.call.get(), soft);
        for (const MacroParam& p : n.caller->params) check_expr(p.default_value.get(), false);
        check_body(n.caller->body, false);
        break;
      }
      case Node::Kind::kFilterBlock: {
        const auto& n = static_cast<const FilterBlockNode&>(*node);
        for (const ExprPtr& f : n.filters) check_expr(f.get(), false);
        check_body(n.body, false);
        break;
      }
      case Node::Kind::kWith: {
        const auto& n = static_cast<const WithNode&>(*node);
        for (const auto& [target, value] : n.assignments) check_expr(value.get(), soft);
        check_body(n.body, false);
        break;
      }
      case Node::Kind::kScope: check_body(static_cast<const ScopeNode&>(*node).body, false); break;
      default: break;
    }
  }
}

}  // namespace

void check_filter_and_test_names(const Body& body) { check_body(body, false); }

}  // namespace deltaserve::jinja
