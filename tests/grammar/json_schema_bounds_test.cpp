// minItems / maxItems, minLength / maxLength and numeric bounds: values at and beyond each
// bound, plus random walks through the matcher whose every result is checked.
#include <gtest/gtest.h>

#include <string>

#include "tests/grammar/grammar_test_util.h"

namespace deltaserve::runtime::grammar {
namespace {

using test::accepts;
using test::live_prefix;
using test::random_walk;
using test::schema_grammar;

// Code points of a decoded UTF-8 string.
size_t num_code_points(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

TEST(JsonSchemaBounds, ArrayItemCounts) {
  const auto g = schema_grammar(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})");
  for (const char* ok : {"[1,2]", "[1, 2, 3]", "[1,2,3,4]"}) EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"[]", "[1]", "[1,2,3,4,5]", "[1,2,]"}) EXPECT_FALSE(accepts(*g, bad)) << bad;
  EXPECT_FALSE(live_prefix(*g, "[1,2,3,4,"));  // a fifth item is refused as soon as its comma comes
  const auto at_least = schema_grammar(R"({"type":"array","minItems":1})");
  EXPECT_FALSE(accepts(*at_least, "[]"));
  EXPECT_TRUE(accepts(*at_least, R"([1,"a",[null]])"));
  const auto at_most = schema_grammar(R"({"type":"array","items":{"type":"boolean"},"maxItems":1})");
  for (const char* ok : {"[]", "[true]"}) EXPECT_TRUE(accepts(*at_most, ok)) << ok;
  EXPECT_FALSE(accepts(*at_most, "[true,false]"));
  const auto none = schema_grammar(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(accepts(*none, "[]"));
  EXPECT_FALSE(accepts(*none, "[1]"));
  const auto exact = schema_grammar(R"({"type":"array","items":{"type":"null"},"minItems":3,"maxItems":3})");
  EXPECT_TRUE(accepts(*exact, "[null,null,null]"));
  EXPECT_FALSE(accepts(*exact, "[null,null]"));
  EXPECT_FALSE(accepts(*exact, "[null,null,null,null]"));
}

TEST(JsonSchemaBounds, ArrayItemCountsRandomWalk) {
  const auto g = schema_grammar(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":5})");
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const auto text = random_walk(*g, rng, 400);
    ASSERT_TRUE(text.has_value());
    const SchemaJson v = SchemaJson::parse(*text);
    ASSERT_TRUE(v.is_array()) << *text;
    EXPECT_GE(v.size(), 2u) << *text;
    EXPECT_LE(v.size(), 5u) << *text;
  }
}

TEST(JsonSchemaBounds, StringLengthsCountCodePoints) {
  const auto g = schema_grammar(R"({"type":"string","minLength":2,"maxLength":3})");
  for (const char* ok : {R"("ab")", R"("abc")", "\"\xE6\x97\xA5\xE6\x9C\xAC\"", "\"\xF0\x9F\x98\x80\xC3\xA9x\"",
                         R"("\n\u00e9")", R"("a\"\\")"})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {R"("")", R"("a")", R"("abcd")", "\"\xE6\x97\xA5\"", R"("\u00e9")", R"("ab\ncd")",
                          "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\""})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  const auto at_least = schema_grammar(R"({"type":"string","minLength":1})");
  EXPECT_FALSE(accepts(*at_least, R"("")"));
  EXPECT_TRUE(accepts(*at_least, R"("a long string")"));
  const auto at_most = schema_grammar(R"({"type":"string","maxLength":0})");
  EXPECT_TRUE(accepts(*at_most, R"("")"));
  EXPECT_FALSE(accepts(*at_most, R"(" ")"));
}

TEST(JsonSchemaBounds, StringLengthsRandomWalk) {
  const auto g = schema_grammar(R"({"type":"string","minLength":3,"maxLength":6})");
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    const auto text = random_walk(*g, rng, 200);
    ASSERT_TRUE(text.has_value());
    const SchemaJson v = SchemaJson::parse(*text);  // throws on invalid JSON or UTF-8
    ASSERT_TRUE(v.is_string()) << *text;
    const size_t n = num_code_points(v.get<std::string>());
    EXPECT_GE(n, 3u) << *text;
    EXPECT_LE(n, 6u) << *text;
  }
}

TEST(JsonSchemaBounds, IntegerRanges) {
  const auto g = schema_grammar(R"({"type":"integer","minimum":-15,"maximum":230})");
  for (const char* ok : {"-15", "-9", "-1", "0", "7", "10", "99", "100", "199", "229", "230"})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"-16", "-20", "-150", "231", "240", "300", "1000", "-0", "007", "1.0"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  const auto ex = schema_grammar(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  for (const char* ok : {"1", "5", "9"}) EXPECT_TRUE(accepts(*ex, ok)) << ok;
  for (const char* bad : {"0", "10", "-1"}) EXPECT_FALSE(accepts(*ex, bad)) << bad;
  const auto fractional = schema_grammar(R"({"type":"integer","minimum":1.5,"exclusiveMaximum":3.5})");
  for (const char* ok : {"2", "3"}) EXPECT_TRUE(accepts(*fractional, ok)) << ok;
  for (const char* bad : {"1", "4"}) EXPECT_FALSE(accepts(*fractional, bad)) << bad;
  const auto open_top = schema_grammar(R"({"type":"integer","minimum":100,"multipleOf":1})");
  for (const char* ok : {"100", "101", "999", "1000", "9999999999999999"}) EXPECT_TRUE(accepts(*open_top, ok)) << ok;
  for (const char* bad : {"99", "0", "-100", "10000000000000000"}) EXPECT_FALSE(accepts(*open_top, bad)) << bad;
  const auto negative = schema_grammar(R"({"type":"integer","minimum":-1000,"maximum":-100})");
  for (const char* ok : {"-100", "-555", "-1000"}) EXPECT_TRUE(accepts(*negative, ok)) << ok;
  for (const char* bad : {"-99", "-1001", "100", "0"}) EXPECT_FALSE(accepts(*negative, bad)) << bad;
  const auto point = schema_grammar(R"({"type":"integer","minimum":42,"maximum":42})");
  EXPECT_TRUE(accepts(*point, "42"));
  EXPECT_FALSE(accepts(*point, "4"));
}

TEST(JsonSchemaBounds, IntegerRangesRandomWalk) {
  struct Case {
    const char* schema;
    int64_t lo, hi;
  };
  for (const Case& c : {Case{R"({"type":"integer","minimum":-15,"maximum":230})", -15, 230},
                        Case{R"({"type":"integer","minimum":1907,"maximum":2031})", 1907, 2031},
                        Case{R"({"type":"integer","exclusiveMinimum":-1000,"exclusiveMaximum":-7})", -999, -8},
                        Case{R"({"type":"integer","minimum":5})", 5, 9'999'999'999'999'999}}) {
    const auto g = schema_grammar(c.schema);
    std::mt19937 rng(3);
    for (int i = 0; i < 300; ++i) {
      const auto text = random_walk(*g, rng, 40, 0.3);
      ASSERT_TRUE(text.has_value()) << c.schema;
      const SchemaJson v = SchemaJson::parse(*text);
      ASSERT_TRUE(v.is_number_integer()) << *text;
      EXPECT_GE(v.get<int64_t>(), c.lo) << *text;
      EXPECT_LE(v.get<int64_t>(), c.hi) << *text;
    }
  }
}

TEST(JsonSchemaBounds, NumberRanges) {
  const auto g = schema_grammar(R"({"type":"number","minimum":-2,"maximum":3})");
  for (const char* ok : {"-2", "-2.0", "-1.999", "-0.5", "0", "0.25", "2.999999", "3", "3.000"})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"-2.01", "-3", "3.001", "4", "1e0", "03", "3."}) EXPECT_FALSE(accepts(*g, bad)) << bad;
  const auto ex = schema_grammar(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1.0})");
  for (const char* ok : {"0.5", "0.001", "0.999"}) EXPECT_TRUE(accepts(*ex, ok)) << ok;
  for (const char* bad : {"0", "0.0", "0.000", "1", "1.0", "-0.5"}) EXPECT_FALSE(accepts(*ex, bad)) << bad;
  const auto negative = schema_grammar(R"({"type":"number","exclusiveMaximum":-1})");
  for (const char* ok : {"-1.5", "-2", "-1.01", "-123456"}) EXPECT_TRUE(accepts(*negative, ok)) << ok;
  for (const char* bad : {"-1", "-1.0", "-0.5", "0", "5"}) EXPECT_FALSE(accepts(*negative, bad)) << bad;
  const auto both = schema_grammar(R"({"type":"number","minimum":0,"exclusiveMinimum":0})");  // the stricter wins
  EXPECT_FALSE(accepts(*both, "0"));
  EXPECT_TRUE(accepts(*both, "0.1"));
}

TEST(JsonSchemaBounds, NumberRangesRandomWalk) {
  struct Case {
    const char* schema;
    double lo, hi;
    bool lo_ex, hi_ex;
  };
  for (const Case& c : {Case{R"({"type":"number","minimum":-2,"maximum":3})", -2, 3, false, false},
                        Case{R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", 0, 1, true, true},
                        Case{R"({"type":"number","exclusiveMinimum":-3,"maximum":-1})", -3, -1, true, false}}) {
    const auto g = schema_grammar(c.schema);
    std::mt19937 rng(5);
    for (int i = 0; i < 300; ++i) {
      const auto text = random_walk(*g, rng, 40, 0.3);
      ASSERT_TRUE(text.has_value()) << c.schema;
      const double v = SchemaJson::parse(*text).get<double>();
      EXPECT_TRUE(c.lo_ex ? v > c.lo : v >= c.lo) << c.schema << " " << *text;
      EXPECT_TRUE(c.hi_ex ? v < c.hi : v <= c.hi) << c.schema << " " << *text;
    }
  }
}

TEST(JsonSchemaBounds, UnsupportedFormsAreErrors) {
  const char* bad[] = {
      R"({"type":"array","maxItems":100000})",
      R"({"type":"array","minItems":3,"maxItems":2})",
      R"({"type":"array","minItems":-1})",
      R"({"type":"string","maxLength":1000000})",
      R"({"type":"string","minLength":1.5})",
      R"({"minLength":1})",                                 // no type: nothing would enforce it
      R"({"type":"string","enum":["a"],"maxLength":3})",   // enum values are written as they are
      R"({"type":"integer","minimum":5,"maximum":4})",
      R"({"type":"integer","multipleOf":2.5})",             // fractional
      R"({"type":"number","multipleOf":0.01})",
      R"({"type":"integer","multipleOf":1001})",            // past kMaxMultipleOf
      R"({"type":"integer","multipleOf":0})",
      R"({"type":"integer","multipleOf":5,"minimum":10})",  // not combined with bounds
      R"({"type":"number","minimum":0.5})",
      R"({"type":"number","exclusiveMinimum":true})",
      R"({"type":"number","minimum":1,"exclusiveMaximum":1})",
  };
  for (const char* schema : bad) EXPECT_THROW(schema_grammar(schema), SchemaError) << schema;
  try {
    schema_grammar(R"({"type":"object","properties":{"x":{"type":"number","multipleOf":0.5}}})");
    FAIL();
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("properties.x.multipleOf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("only integral values"), std::string::npos) << e.what();
  }
}

// OpenAI's strict mode lists multipleOf: integral ones are enforced exactly (a walk over the
// remainder), on integers and numbers alike.
TEST(JsonSchemaBounds, IntegralMultipleOf) {
  for (const int k : {1, 2, 3, 7, 10, 12, 25, 1000}) {
    for (const char* type : {"integer", "number"}) {
      const auto g = schema_grammar(std::string(R"({"type":")") + type + R"(","multipleOf":)" + std::to_string(k) + "}");
      for (int64_t v = -130; v <= 3100; ++v) {
        EXPECT_EQ(accepts(*g, std::to_string(v)), v % k == 0) << type << " " << k << ": " << v;
      }
      EXPECT_EQ(accepts(*g, "9999999999999000"), 9999999999999000 % k == 0) << k;  // 16 digits
      EXPECT_FALSE(accepts(*g, "10000000000000000")) << k;                          // 17
      if (k != 1) {  // -0 is 0: the plain integer rule (k = 1) takes it
        EXPECT_FALSE(accepts(*g, "-0")) << k;
      }
      EXPECT_FALSE(accepts(*g, "00")) << k;
      EXPECT_FALSE(accepts(*g, std::to_string(k) + ".0")) << k;
      std::mt19937 rng(k);
      for (int i = 0; i < 100; ++i) {
        const auto text = random_walk(*g, rng, 40);
        ASSERT_TRUE(text.has_value()) << k;
        EXPECT_EQ(std::stoll(*text) % k, 0) << k << ": " << *text;
      }
    }
  }
  // A number with multipleOf 1 is an integer, its bounds held.
  const auto g = schema_grammar(R"({"type":"number","multipleOf":1,"minimum":-2.5,"maximum":3})");
  EXPECT_TRUE(accepts(*g, "-2"));
  EXPECT_TRUE(accepts(*g, "3"));
  EXPECT_FALSE(accepts(*g, "1.5"));
  EXPECT_FALSE(accepts(*g, "-3"));
}

}  // namespace
}  // namespace deltaserve::runtime::grammar
