// Language features, error reporting and resource limits of the Jinja interpreter. Broad
// semantic coverage against jinja2 itself lives in fixture_test.cpp; these tests pin down
// behaviour the fixtures cannot express (positions, limits, threads).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "server/jinja/template.h"

namespace deltaserve::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string render(const std::string& source, const Json& context = Json::object(),
                   const RenderOptions& options = {}) {
  return Template::parse(source).render(context, options);
}

// Runs `fn`, expecting a TemplateError whose what() contains `needle`; returns the error.
template <typename Fn>
TemplateError expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "error was: " << e.what() << "\nexpected it to contain: " << needle;
    return e;
  }
  ADD_FAILURE() << "expected a TemplateError containing: " << needle;
  return TemplateError("none");
}

TEST(Template, RendersTextAndExpressions) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 'a' ~ 1 }} {{ [1, 2][-1] }}"), "7 a1 2");
  EXPECT_EQ(render("{{ missing }}|{{ missing is defined }}"), "|False");
  EXPECT_EQ(render("trailing newline is dropped\n"), "trailing newline is dropped");
}

TEST(Template, KeepsObjectKeyOrderInToJson) {
  Json context = Json::parse(R"({"tool": {"type": "function", "function": {"name": "f", "a": 1}}})");
  EXPECT_EQ(render("{{ tool | tojson }}", context),
            R"({"type": "function", "function": {"name": "f", "a": 1}})");
  EXPECT_EQ(render("{{ {'é': 'ü'} | tojson }}|{{ {'é': 'ü'} | tojson(ensure_ascii=true) }}"),
            "{\"é\": \"ü\"}|{\"\\u00e9\": \"\\u00fc\"}");
}

TEST(Template, LoopVariablesAndControl) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}"
                   "{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "1a,2b,3c");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}={{ v }} {% endfor %}",
                   Json::parse(R"({"d": {"b": 1, "a": 2}})")),
            "b=1 a=2 ");
}

TEST(Template, MacrosWithDefaultsAndCaller) {
  EXPECT_EQ(render("{% macro f(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}"),
            "1B12");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"),
            "[in]");
}

TEST(Template, StrftimeNowUsesTheInjectedClock) {
  RenderOptions options;
  options.local_time = [] {
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 0;
    tm.tm_mday = 2;
    return tm;
  };
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}", Json::object(), options), "2024-01-02");
}

TEST(TemplateErrors, SyntaxErrorsCarryLineAndColumn) {
  TemplateError e = expect_error([] { Template::parse("line one\n  {{ x | no_such_filter }}"); },
                                 "no filter named 'no_such_filter'");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 10);
  expect_error([] { Template::parse("{{ x is no_such_test }}"); }, "no test named 'no_such_test'");
  expect_error([] { Template::parse("{% frobnicate %}"); }, "unknown tag 'frobnicate'");
  expect_error([] { Template::parse("{% endfor %}"); }, "unknown tag 'endfor'");
  expect_error([] { Template::parse("{% include 'x.jinja' %}"); }, "not supported");
  expect_error([] { Template::parse("{% break %}"); }, "'break' outside of a loop");
  expect_error([] { Template::parse("{{ 1 + }}"); }, "unexpected end of print statement");
  expect_error([] { Template::parse("{{ 'unterminated }}"); }, "unterminated string literal");
  expect_error([] { Template::parse("{{ a ? b }}"); }, "unexpected character '?'");
  expect_error([] { Template::parse("{{ (1 }}"); }, "unexpected '}'");
}

TEST(TemplateErrors, UnknownFiltersInIfBlocksFailOnlyWhenReached) {
  // jinja2 3.x defers the check inside {% if %} and inline ifs, so templates can guard them.
  EXPECT_EQ(render("{% if false %}{{ x | nope }}{% endif %}{{ 1 | nope if false }}ok"), "ok");
  expect_error([] { render("{% if true %}{{ x | nope }}{% endif %}"); }, "no filter named 'nope'");
  expect_error([] { Template::parse("{% if false %}{% for a in b %}{{ a | nope }}{% endfor %}{% endif %}"); },
               "no filter named 'nope'");
  expect_error([] { Template::parse("{% macro m() %}{{ 1 is nope }}{% endmacro %}"); },
               "no test named 'nope'");
}

TEST(TemplateErrors, UnclosedConstructs) {
  TemplateError e = expect_error([] { Template::parse("a\n{% if x %}\nbody"); },
                                 "'if' block opened at line 2 is never closed");
  EXPECT_GT(e.line(), 0);
  expect_error([] { Template::parse("{% for x in y %}{% if x %}{% endfor %}"); },
               "unknown tag 'endfor'; the innermost open block is 'if' (line 1), which expects "
               "'elif' or 'else' or 'endif'");
  expect_error([] { Template::parse("{{ x "); }, "is never closed");
  expect_error([] { Template::parse("{% if x "); }, "is never closed");
  expect_error([] { Template::parse("{# comment"); }, "missing end of comment tag");
  expect_error([] { Template::parse("{% raw %} no end"); }, "missing end of raw directive");
  expect_error([] { Template::parse("{% macro m() %}"); }, "'macro' block");
}

TEST(TemplateErrors, RaiseExceptionKeepsTheMessage) {
  TemplateError e = expect_error(
      [] { render("ok\n{{ raise_exception('Conversation roles must alternate') }}"); },
      "Conversation roles must alternate");
  EXPECT_EQ(e.message(), "Conversation roles must alternate");
  EXPECT_EQ(e.line(), 2);
}

TEST(TemplateErrors, RuntimeTypeErrors) {
  expect_error([] { render("{{ 1 + 'a' }}"); }, "unsupported operand type(s) for +: 'int' and 'str'");
  expect_error([] { render("{{ x.y.z }}"); }, "'x' is undefined");
  expect_error([] { render("{{ d.y.z }}", Json::parse(R"({"d": {}})")); },
               "'dict object' has no attribute 'y'");
  expect_error([] { render("{{ [1].append(2) }}"); }, "unsafe");
  expect_error([] { render("{{ 1 / 0 }}"); }, "division by zero");
  expect_error([] { render("{{ none | tojson }}{{ u | tojson }}"); }, "not JSON serializable");
  expect_error([] { render("{% for x in 5 %}{% endfor %}"); }, "'int' object is not iterable");
  expect_error([] { render("{{ 9223372036854775807 + 1 }}"); }, "integer overflow");
}

TEST(TemplateLimits, DeepRecursionIsStopped) {
  expect_error([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); },
               "nested deeper than 100 levels");
}

TEST(TemplateLimits, HugeLoopsAreStopped) {
  RenderOptions options;
  options.max_steps = 200'000;  // the default (2M) takes about a second to exhaust
  expect_error([&] { render("{% for i in range(100000) %}{% for j in range(100000) %}"
                            "{% endfor %}{% endfor %}", Json::object(), options); },
               "step budget");
  expect_error([] { render("{{ range(1000000) | length }}"); }, "Range too big");
}

TEST(TemplateLimits, OutputSizeIsBounded) {
  RenderOptions options;
  options.max_output_bytes = 1 << 20;
  expect_error([&] { render("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}",
                            Json::object(), options); },
               "exceeds the limit");
  expect_error([] { render("{{ 'x' * 1000000000000 }}"); }, "exceeds the limit");
  expect_error([&] { render("{% set ns = namespace(s='xx') %}{% for i in range(100) %}"
                            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", Json::object(), options); },
               "exceeds the limit");
}

TEST(TemplateLimits, NestingIsBounded) {
  expect_error([] { Template::parse("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"); },
               "nested deeper");
  expect_error([] { Template::parse("{{ " + std::string(5000, '-') + "1 }}"); }, "nested deeper");
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  expect_error([&] { Template::parse(blocks); }, "nested deeper");
  expect_error([] { render("{% set ns = namespace(x=[]) %}{% for i in range(2000) %}"
                           "{% set ns.x = [ns.x] %}{% endfor %}"); },
               "nesting");
  Json deep = Json::parse(std::string(2000, '[') + std::string(2000, ']'));
  expect_error([&] { render("{{ x }}", {{"x", deep}}); }, "nesting");
}

TEST(TemplateLimits, NamespacesCannotFormCycles) {
  expect_error([] { render("{% set ns = namespace(a=1) %}{% set ns.a = ns %}"); }, "cannot hold");
  expect_error([] { render("{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}"); }, "cannot hold");
  expect_error([] { render("{% macro m() %}{% endmacro %}{% set ns = namespace(f=m) %}"); },
               "cannot hold");
}

TEST(Template, ConcurrentRendersShareOneTemplate) {
  const Template tmpl = Template::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m | length %}"
      "{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Json context = {{"messages", Json::array()}};
      for (int i = 0; i <= t; ++i) context["messages"].push_back(std::string(10, 'x'));
      for (int rep = 0; rep < 50; ++rep) results[t] = tmpl.render(context);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(results[t], std::to_string(10 * (t + 1)));
}

}  // namespace
}  // namespace deltaserve::jinja
