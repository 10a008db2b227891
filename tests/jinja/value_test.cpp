// Python-compatible value formatting: float repr, json.dumps, str methods on UTF-8.
#include <gtest/gtest.h>

#include <cmath>

#include "server/jinja/py_string.h"
#include "server/jinja/python_json.h"
#include "server/jinja/template_error.h"
#include "server/jinja/value.h"

namespace deltaserve::jinja {
namespace {

TEST(FormatFloat, MatchesPythonRepr) {
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(format_float(1e-4), "0.0001");
  EXPECT_EQ(format_float(1e-5), "1e-05");
  EXPECT_EQ(format_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_float(123456.789), "123456.789");
  EXPECT_EQ(format_float(1e100), "1e+100");
  EXPECT_EQ(format_float(5e-324), "5e-324");
  EXPECT_EQ(format_float(INFINITY), "inf");
}

TEST(PythonJson, DumpsLikeJsonModule) {
  Value v = Value::from_json(nlohmann::ordered_json::parse(
      R"({"b": [1, 2.5, true, null, "x\n\u0001é😀"], "a": {}, "c": []})"));
  JsonDumpOptions options;
  EXPECT_EQ(python_json_dumps(v, options),
            "{\"b\": [1, 2.5, true, null, \"x\\n\\u0001é😀\"], \"a\": {}, \"c\": []}");
  options.ensure_ascii = true;
  options.sort_keys = true;
  EXPECT_EQ(python_json_dumps(v, options),
            "{\"a\": {}, \"b\": [1, 2.5, true, null, \"x\\n\\u0001\\u00e9\\ud83d\\ude00\"], \"c\": []}");
  options = JsonDumpOptions{};
  options.indent = "  ";
  EXPECT_EQ(python_json_dumps(Value::from_json(nlohmann::ordered_json::parse(R"({"k": [1]})")), options),
            "{\n  \"k\": [\n    1\n  ]\n}");
  EXPECT_THROW(python_json_dumps(Value(), options), TemplateError);
}

TEST(PyString, CodePointSemantics) {
  EXPECT_EQ(py::length("héllo😀"), 6u);
  EXPECT_EQ(py::slice("héllo", std::nullopt, std::nullopt, -1), "olléh");
  EXPECT_EQ(py::slice("héllo", 1, 3, std::nullopt), "él");
  EXPECT_EQ(*py::at("日本語", -1), "語");
  EXPECT_EQ(py::strip("\u3000 x \n", std::nullopt, py::StripSide::kBoth), "x");
  EXPECT_EQ(py::split("  a  b ", std::nullopt, -1), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(py::rsplit("a,b,c", std::string(","), 1), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_EQ(py::title("hello wORLD it's"), "Hello World It'S");
  EXPECT_EQ(py::replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(py::find("é-b", "b", false), 2);
}

TEST(Values, PythonEqualityAndRepr) {
  EXPECT_TRUE(values_equal(Value::integer(1), Value::number(1.0)));
  EXPECT_TRUE(values_equal(Value::integer(1), Value::boolean(true)));
  EXPECT_FALSE(values_equal(Value::list({}, true), Value::list({})));
  EXPECT_EQ(Value::list({Value::string("it's"), Value::none()}, true).repr(), "(\"it's\", None)");
  EXPECT_THROW(value_less(Value::string("a"), Value::integer(1)), TemplateError);
}

}  // namespace
}  // namespace deltaserve::jinja
