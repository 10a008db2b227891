// Internal to the filter library: the filter functions, split over filters.cpp (strings and
// numbers, and the registry) and sequence_filters.cpp (lists and mappings), and shared helpers.
#pragma once

#include "server/jinja/interpreter.h"
#include "server/jinja/value.h"

namespace deltaserve::jinja::filter_impl {

// jinja2's make_attrgetter: "a.b.0" walks getitem for each dotted part.
Value get_path(Interpreter& interp, Value item, const Value& attribute);
// jinja2's ignore_case: lower-cases strings, leaves other values alone.
Value ignore_case(const Value& v);
// jinja2's soft_str: str() unless already a string.
Value soft_str(const Value& v);

// The filters: f(interp, input, args) -> result.
Value apply_filter(Interpreter& interp, const Value& v, CallArgs& args);
Value f_abs(Interpreter& interp, const Value& v, CallArgs& args);
Value f_attr(Interpreter& interp, const Value& v, CallArgs& args);
Value f_batch(Interpreter& interp, const Value& v, CallArgs& args);
Value f_capitalize(Interpreter& interp, const Value& v, CallArgs& args);
Value f_center(Interpreter& interp, const Value& v, CallArgs& args);
Value f_default(Interpreter& interp, const Value& v, CallArgs& args);
Value f_dictsort(Interpreter& interp, const Value& v, CallArgs& args);
Value f_escape(Interpreter& interp, const Value& v, CallArgs& args);
Value f_first(Interpreter& interp, const Value& v, CallArgs& args);
Value f_float(Interpreter& interp, const Value& v, CallArgs& args);
Value f_format(Interpreter& interp, const Value& v, CallArgs& args);
Value f_indent(Interpreter& interp, const Value& v, CallArgs& args);
Value f_int(Interpreter& interp, const Value& v, CallArgs& args);
Value f_items(Interpreter& interp, const Value& v, CallArgs& args);
Value f_join(Interpreter& interp, const Value& v, CallArgs& args);
Value f_last(Interpreter& interp, const Value& v, CallArgs& args);
Value f_length(Interpreter& interp, const Value& v, CallArgs& args);
Value f_list(Interpreter& interp, const Value& v, CallArgs& args);
Value f_lower(Interpreter& interp, const Value& v, CallArgs& args);
Value f_map(Interpreter& interp, const Value& v, CallArgs& args);
Value f_max(Interpreter& interp, const Value& v, CallArgs& args);
Value f_min(Interpreter& interp, const Value& v, CallArgs& args);
Value f_reject(Interpreter& interp, const Value& v, CallArgs& args);
Value f_rejectattr(Interpreter& interp, const Value& v, CallArgs& args);
Value f_replace(Interpreter& interp, const Value& v, CallArgs& args);
Value f_reverse(Interpreter& interp, const Value& v, CallArgs& args);
Value f_round(Interpreter& interp, const Value& v, CallArgs& args);
Value f_safe(Interpreter& interp, const Value& v, CallArgs& args);
Value f_select(Interpreter& interp, const Value& v, CallArgs& args);
Value f_selectattr(Interpreter& interp, const Value& v, CallArgs& args);
Value f_sort(Interpreter& interp, const Value& v, CallArgs& args);
Value f_string(Interpreter& interp, const Value& v, CallArgs& args);
Value f_sum(Interpreter& interp, const Value& v, CallArgs& args);
Value f_title(Interpreter& interp, const Value& v, CallArgs& args);
Value f_tojson(Interpreter& interp, const Value& v, CallArgs& args);
Value f_trim(Interpreter& interp, const Value& v, CallArgs& args);
Value f_truncate(Interpreter& interp, const Value& v, CallArgs& args);
Value f_unique(Interpreter& interp, const Value& v, CallArgs& args);
Value f_upper(Interpreter& interp, const Value& v, CallArgs& args);
Value f_wordcount(Interpreter& interp, const Value& v, CallArgs& args);
Value parse_float(Interpreter& interp, const Value& v, CallArgs& args);
Value parse_int(Interpreter& interp, const Value& v, CallArgs& args);

}  // namespace deltaserve::jinja::filter_impl
