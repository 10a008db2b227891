// jinja2's filters over sequences and mappings (filters.py): sort, map, select, join, ...
#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_set>

#include "server/jinja/builtins.h"
#include "server/jinja/call_args.h"
#include "server/jinja/filter_impl.h"
#include "server/jinja/py_string.h"

namespace deltaserve::jinja::filter_impl {
namespace {

std::vector<Value> sorted(Interpreter& interp, std::vector<Value> items, bool reverse,
                          bool case_sensitive, const std::function<Value(const Value&)>& key) {
  interp.tick(items.size());
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value k = key(item);
    keyed.emplace_back(case_sensitive ? k : ignore_case(k), std::move(item));
  }
  // Python's sort is stable and reverse=True keeps equal elements in their original order.
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? value_less(b.first, a.first) : value_less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return out;
}

Value min_max(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  BoundArgs a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  bool case_sensitive = a.get(0, Value::boolean(false)).truthy();
  auto key = [&](const Value& item) {
    Value k = a.given(1) ? get_path(interp, item, a.at(1)) : item;
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? value_less(best_key, k) : value_less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value select_or_reject(Interpreter& interp, const Value& v, CallArgs& args, bool by_attr,
                       bool select) {
  size_t first_test_arg = by_attr ? 1 : 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) throw TemplateError("selectattr/rejectattr need an attribute");
    attribute = args.positional[0];
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > first_test_arg) {
    test = expect_str(args.positional[first_test_arg], "test name");
    if (!is_known_test(*test)) throw TemplateError("no test named '" + *test + "'");
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first_test_arg) + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  if (!v.truthy()) return Value::list({});  // jinja2 checks `if value:` before iterating
  for (const Value& item : interp.iterate(v)) {
    interp.tick();
    Value subject = by_attr ? get_path(interp, item, attribute) : item;
    bool passed;
    if (test) {
      CallArgs call = test_args;
      passed = apply_test(interp, *test, subject, call);
    } else {
      passed = subject.truthy();
    }
    if (passed == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

// A hashable identity for unique(): Python treats 1, 1.0 and True as the same key.
std::string unique_key(const Value& v) {
  if (v.is_number() && std::floor(v.as_double()) == v.as_double() && std::fabs(v.as_double()) < 9e15) {
    return "n" + std::to_string(static_cast<int64_t>(v.as_double()));
  }
  return v.type_name() + ":" + v.repr();
}

}  // namespace

Value f_batch(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("batch", args, {"linecount", "fill_with"});
  int64_t n = expect_int(a.get(0, Value::integer(1)), "linecount");
  if (n <= 0) throw TemplateError("batch() linecount must be positive");
  std::vector<Value> out, row;
  for (Value& item : interp.iterate(v)) {
    row.push_back(std::move(item));
    if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::list(std::exchange(row, {})));
  }
  if (!row.empty()) {
    if (a.given(1)) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(a.at(1));
    }
    out.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("length", args, {});
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value::integer(0);
    case Value::Kind::kString: return Value::integer(static_cast<int64_t>(py::length(v.str())));
    case Value::Kind::kList: return Value::integer(static_cast<int64_t>(v.list().items.size()));
    case Value::Kind::kDict: return Value::integer(static_cast<int64_t>(v.dict().items.size()));
    default: throw TemplateError("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_dictsort(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw TemplateError("dictsort expects a mapping, got '" + v.type_name() + "'");
  std::string by = a.given(1) ? expect_str(a.at(1), "by") : "key";
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.dict().items) {
    pairs.push_back(Value::list({Value::string(key), value}, true));
  }
  size_t pos = by == "key" ? 0 : 1;
  return Value::list(sorted(interp, std::move(pairs), a.get(2, Value::boolean(false)).truthy(),
                            a.get(0, Value::boolean(false)).truthy(),
                            [pos](const Value& p) { return p.list().items[pos]; }));
}

Value f_first(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("first", args, {});
  if (v.is_list()) {
    if (v.list().items.empty()) return Value::undefined("No first item, sequence was empty.");
    return v.list().items.front();
  }
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("last", args, {});
  std::vector<Value> items = interp.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan.

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs("items", args, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.dict().items) {
    pairs.push_back(Value::list({Value::string(key), value}, true));
  }
  return Value::list(std::move(pairs));
}

Value f_join(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("join", args, {"d", "attribute"});
  std::string sep = a.get(0, Value::string("")).to_str();
  std::string out;
  bool first = true;
  for (const Value& item : interp.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (a.given(1) ? get_path(interp, item, a.at(1)) : item).to_str();
    interp.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_list(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("list", args, {});
  return Value::list(interp.iterate(v));
}

Value f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::list({});  // jinja2 checks `if value:` before iterating
  if (args.positional.empty()) {
    BoundArgs a("map", args, {"attribute", "default"}, 0);
    if (!a.has(0)) throw TemplateError("map() needs a filter name or attribute=");
    for (const Value& item : interp.iterate(v)) {
      Value got = get_path(interp, item, a.at(0));
      if (a.given(1) && got.is_undefined()) got = a.at(1);
      out.push_back(std::move(got));
    }
    return Value::list(std::move(out));
  }
  std::string name = expect_str(args.positional[0], "map() filter name");
  if (!is_known_filter(name)) throw TemplateError("no filter named '" + name + "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : interp.iterate(v)) {
    CallArgs call = rest;
    out.push_back(apply_filter(interp, name, item, call));
  }
  return Value::list(std::move(out));
}

Value f_max(Interpreter& interp, const Value& v, CallArgs& args) { return min_max(interp, v, args, true); }

Value f_min(Interpreter& interp, const Value& v, CallArgs& args) { return min_max(interp, v, args, false); }

Value f_select(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, true); }

Value f_reject(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, false); }

Value f_selectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, true); }

Value f_rejectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, false); }

Value f_reverse(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs("reverse", args, {});
  if (v.is_string()) return Value::string(py::slice(v.str(), std::nullopt, std::nullopt, -1));
  std::vector<Value> items = interp.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("sort", args, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> attrs;
  if (a.given(2)) {
    if (a.at(2).is_string()) {
      for (const std::string& part : py::split(a.at(2).str(), std::string(","), -1)) {
        attrs.push_back(Value::string(py::strip(part, std::nullopt, py::StripSide::kBoth)));
      }
    } else {
      attrs.push_back(a.at(2));
    }
  }
  auto key = [&](const Value& item) {
    if (attrs.empty()) return item;
    if (attrs.size() == 1) return get_path(interp, item, attrs[0]);
    std::vector<Value> parts;
    for (const Value& attr : attrs) parts.push_back(get_path(interp, item, attr));
    return Value::list(std::move(parts));
  };
  bool case_sensitive = a.get(1, Value::boolean(false)).truthy();
  auto key_ci = [&](const Value& item) {
    Value k = key(item);
    if (case_sensitive || !k.is_list()) return k;
    std::vector<Value> lowered;
    for (const Value& part : k.list().items) lowered.push_back(ignore_case(part));
    return Value::list(std::move(lowered));
  };
  return Value::list(sorted(interp, interp.iterate(v), a.get(0, Value::boolean(false)).truthy(),
                            case_sensitive, key_ci));
}

Value f_sum(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("sum", args, {"attribute", "start"});
  Value total = a.get(1, Value::integer(0));
  for (const Value& item : interp.iterate(v)) {
    Value x = a.given(0) ? get_path(interp, item, a.at(0)) : item;
    if (!x.is_number() || !total.is_number()) {
      throw TemplateError("unsupported operand type(s) for +: '" + total.type_name() + "' and '" +
                          x.type_name() + "'");
    }
    if (total.is_float() || x.is_float()) {
      total = Value::number(total.as_double() + x.as_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.int_value(), x.int_value(), &r)) throw TemplateError("integer overflow");
      total = Value::integer(r);
    }
  }
  return total;
}

Value f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  BoundArgs a("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a.get(0, Value::boolean(false)).truthy();
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : interp.iterate(v)) {
    interp.tick();
    Value key = a.given(1) ? get_path(interp, item, a.at(1)) : item;
    if (!case_sensitive) key = ignore_case(key);
    if (seen.insert(unique_key(key)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

}  // namespace deltaserve::jinja::filter_impl
