// Every schema feature of the strict-mode subset: valid examples accepted, invalid refused.
#include <gtest/gtest.h>

#include "tests/grammar/grammar_test_util.h"

namespace deltaserve::runtime::grammar {
namespace {

using test::accepts;
using test::live_prefix;
using test::schema_grammar;

TEST(JsonObjectGrammar, AnyObject) {
  const auto g = json_object_grammar();
  for (const char* ok : {"{}", R"({"a":1})", R"({"a": [1, {"b":null}], "c": "x"})", "\n\n{}", R"({"":true})"})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"[]", R"({"a"})", "{a:1}", R"({"a":1,})", R"({"a":1} )", "   {}", "{ }", "1", R"("s")"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
}

TEST(JsonSchemaGrammar, RequiredPropertiesInOrderNoExtras) {
  const auto g = schema_grammar(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
      "required":["name","age"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(*g, R"({"name":"Bob","age":3})"));
  EXPECT_TRUE(accepts(*g, R"({"name": "Bob", "age": -12})"));
  EXPECT_FALSE(accepts(*g, R"({"name":"Bob"})"));               // age is required
  EXPECT_FALSE(accepts(*g, R"({"name":"Bob","age":3,"x":1})"));  // no additional properties
  EXPECT_FALSE(accepts(*g, R"({"name":"Bob","age":3.5})"));      // integer
  EXPECT_FALSE(accepts(*g, R"({"name":7,"age":3})"));            // string
  EXPECT_FALSE(accepts(*g, R"({"age":3,"name":"Bob"})"));        // properties come in schema order
}

TEST(JsonSchemaGrammar, OptionalProperties) {
  const auto g = schema_grammar(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
      "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  for (const char* ok : {R"({"b":1})", R"({"a":1,"b":2})", R"({"b":1,"c":true})", R"({"a":0,"b":1,"c":false})"})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"{}", R"({"a":1})", R"({,"b":1})", R"({"b":1,})", R"({"a":1,,"b":1})"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  const auto none = schema_grammar(R"({"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":false})");
  EXPECT_TRUE(accepts(*none, "{}"));
  EXPECT_TRUE(accepts(*none, R"({"a":null})"));
  const auto empty = schema_grammar(R"({"type":"object","properties":{},"additionalProperties":false})");
  EXPECT_TRUE(accepts(*empty, "{}"));
  EXPECT_FALSE(accepts(*empty, R"({"a":1})"));
}

TEST(JsonSchemaGrammar, Arrays) {
  const auto g = schema_grammar(R"({"type":"array","items":{"type":"number"}})");
  for (const char* ok : {"[]", "[1]", "[1,2.5,-3e2]", "[0, 1E-2, 10.125]"}) EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"[1,]", "[,1]", R"(["a"])", "[", "[1 ]", "[true]"}) EXPECT_FALSE(accepts(*g, bad)) << bad;
  const auto nested = schema_grammar(R"({"type":"array","items":{"type":"array","items":{"type":"boolean"}}})");
  EXPECT_TRUE(accepts(*nested, "[[true],[],[false,true]]"));
  EXPECT_FALSE(accepts(*nested, "[true]"));
}

TEST(JsonSchemaGrammar, StringEnumAndConst) {
  const auto g = schema_grammar(R"({"type":"string","enum":["red","green","日本"]})");
  for (const char* ok : {R"("red")", R"("green")", R"("日本")"}) EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {R"("blue")", R"("re")", R"("redd")", "red", R"("RED")"}) EXPECT_FALSE(accepts(*g, bad)) << bad;
  EXPECT_TRUE(live_prefix(*g, R"("re)"));
  const auto c = schema_grammar(R"({"const":"fixed"})");
  EXPECT_TRUE(accepts(*c, R"("fixed")"));
  EXPECT_FALSE(accepts(*c, R"("fixe")"));
  const auto mixed = schema_grammar(R"({"enum":[1,"one",null,true,{"k":[2]}]})");
  for (const char* ok : {"1", R"("one")", "null", "true", R"({"k":[2]})"}) EXPECT_TRUE(accepts(*mixed, ok)) << ok;
  EXPECT_FALSE(accepts(*mixed, "2"));
}

TEST(JsonSchemaGrammar, Numbers) {
  const auto g = schema_grammar(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "-0.5", "1e10", "1E-2", "12.75e+3", "123456789012345", "3.141592653589793"})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e999", "1e", "--1", "NaN", "Infinity", "1.0000000000000001"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  const auto i = schema_grammar(R"({"type":"integer"})");
  for (const char* ok : {"0", "-42", "7"}) EXPECT_TRUE(accepts(*i, ok)) << ok;
  for (const char* bad : {"1.0", "1e2", "-", "00", "12345678901234567"}) EXPECT_FALSE(accepts(*i, bad)) << bad;
}

TEST(JsonSchemaGrammar, BooleanNullAndTypeLists) {
  const auto b = schema_grammar(R"({"type":"boolean"})");
  EXPECT_TRUE(accepts(*b, "true"));
  EXPECT_TRUE(accepts(*b, "false"));
  EXPECT_FALSE(accepts(*b, "True"));
  EXPECT_FALSE(accepts(*b, "1"));
  const auto n = schema_grammar(R"({"type":"null"})");
  EXPECT_TRUE(accepts(*n, "null"));
  EXPECT_FALSE(accepts(*n, "nul"));
  const auto list = schema_grammar(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(*list, R"("x")"));
  EXPECT_TRUE(accepts(*list, "null"));
  EXPECT_FALSE(accepts(*list, "0"));
}

TEST(JsonSchemaGrammar, AnyOfSharingPrefixes) {
  const auto g = schema_grammar(R"({"anyOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"],"additionalProperties":false},
      {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind","y"],"additionalProperties":false},
      {"type":"null"}]})");
  for (const char* ok : {R"({"kind":"a","x":1})", R"({"kind":"b","y":"s"})", "null"}) EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {R"({"kind":"a","y":"s"})", R"({"kind":"b","x":1})", R"({"kind":"c","x":1})", "1"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
}

TEST(JsonSchemaGrammar, RefsAndRecursiveDefs) {
  const auto g = schema_grammar(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
      "properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["value","children"],"additionalProperties":false}}})");
  EXPECT_TRUE(accepts(*g, R"({"value":1,"children":[]})"));
  EXPECT_TRUE(accepts(*g, R"({"value":1,"children":[{"value":2,"children":[{"value":3,"children":[]}]}]})"));
  EXPECT_FALSE(accepts(*g, R"({"value":1,"children":[{"value":2}]})"));
  const auto defs = schema_grammar(R"({"type":"object","properties":{"p":{"$ref":"#/definitions/pt"}},
      "required":["p"],"additionalProperties":false,"definitions":{"pt":{"type":"array","items":{"type":"integer"}}}})");
  EXPECT_TRUE(accepts(*defs, R"({"p":[1,2]})"));
  EXPECT_FALSE(accepts(*defs, R"({"p":[1.5]})"));
  // "#" is the root itself: a linked list.
  const auto list = schema_grammar(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},
      "required":["next"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(*list, R"({"next":{"next":{"next":null}}})"));
  EXPECT_FALSE(accepts(*list, R"({"next":{}})"));
}

TEST(JsonSchemaGrammar, StringsAreWellFormedJsonAndUtf8) {
  const auto g = schema_grammar(R"({"type":"string"})");
  for (const char* ok : {R"("")", R"("a\"b\\n\/")", R"("\u00e9\uD7FF\uE000")", "\"\xC3\xA9\"", "\"\xE6\x97\xA5\"",
                         "\"\xF0\x9F\x98\x80\"", "\"tab\\tnew\\n\""})
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"\"a\nb\"", "\"\x01\"", "\"\xC0\x80\"", "\"\x80\"", "\"\xED\xA0\x80\"", "\"\xF5\x80\x80\x80\"",
                          R"("\ud800")", R"("\x")", R"("\u12")", R"("a)", "'a'"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  EXPECT_TRUE(live_prefix(*g, "\"\xE6\x97"));  // a character cut by a token boundary is still live
}

TEST(JsonSchemaGrammar, FreeFormSchemas) {
  const auto any = schema_grammar("{}");
  for (const char* ok : {"1", "[]", R"({"a":[null]})", R"("s")"}) EXPECT_TRUE(accepts(*any, ok)) << ok;
  const auto obj = schema_grammar(R"({"type":"object"})");
  EXPECT_TRUE(accepts(*obj, R"({"k":{"x":1}})"));
  EXPECT_FALSE(accepts(*obj, "[]"));
}

TEST(JsonSchemaGrammar, AnnotationsConstrainNothing) {
  const auto g = schema_grammar(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"T",
      "type":"object","properties":{"a":{"type":"integer","description":"d","default":1,"examples":[2],
      "deprecated":true,"readOnly":true},"b":{"type":"string","writeOnly":true,"$comment":"c"}},
      "required":["a","b"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(*g, R"({"a":3,"b":"x"})"));
  EXPECT_FALSE(accepts(*g, R"({"a":"3","b":"x"})"));
}

TEST(JsonSchemaGrammar, OutsideTheSubsetIsAnError) {
  const char* bad[] = {
      R"({"type":"string","minLength":1,"maxLength":0})",
      R"({"type":"integer","multipleOf":0.5})",
      R"({"oneOf":[{"type":"string"}]})",
      R"({"type":"object","properties":{"a":{"type":"string","format":"date","minLength":3}}})",
      R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})",
      R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})",
      R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}})",
      R"({"$ref":"#/$defs/missing"})",
      R"({"$ref":"https://example.com/schema.json"})",
      R"({"type":"float"})",
      R"({"type":[]})",
      R"({"enum":[]})",
      R"({"anyOf":{}})",
      R"(false)",
      R"(3)",
      R"({"type":"object","properties":[]})",
  };
  for (const char* schema : bad) {
    EXPECT_THROW(schema_grammar(schema), SchemaError) << schema;
  }
  try {
    json_schema_grammar(SchemaJson::parse(R"({"type":"object","properties":{"name":{"type":"string","format":"iri"}}})"),
                        true);
    FAIL();
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("properties.name.format"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'iri' is not supported in strict mode"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("supported: date-time"), std::string::npos) << e.what();
  }
}

// JSON Schema makes format an annotation unless a validator opts in: without strict an
// unknown one constrains nothing (the string is plain, its other keywords still hold);
// with strict it is an error, since strict mode promises the format.
TEST(JsonSchemaGrammar, UnknownFormatIsAnAnnotationUnlessStrict) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"string","format":"iri","maxLength":3},
      "b":{"format":"x-custom"}},"required":["a"],"additionalProperties":false})";
  const auto g = schema_grammar(schema);
  EXPECT_TRUE(accepts(*g, R"({"a":"été"})"));
  EXPECT_TRUE(accepts(*g, R"({"a":"abc","b":[1]})"));
  EXPECT_FALSE(accepts(*g, R"({"a":"abcd"})"));
  EXPECT_THROW(json_schema_grammar(SchemaJson::parse(schema), true), SchemaError);
  // A known format stays enforced either way, and a non-string format is malformed either way.
  const auto known = schema_grammar(R"({"type":"string","format":"uuid"})");
  EXPECT_FALSE(accepts(*known, R"("abc")"));
  EXPECT_THROW(schema_grammar(R"({"type":"string","format":3})"), SchemaError);
  // OpenAPI's number formats (int32, double, ...) are unknown to JSON Schema: the same rule.
  const char* int32 = R"({"type":"integer","format":"int32"})";
  EXPECT_TRUE(accepts(*schema_grammar(int32), "-12"));
  EXPECT_THROW(json_schema_grammar(SchemaJson::parse(int32), true), SchemaError);
  // Assertions stay errors without strict: ignoring one would give output that fails validation.
  EXPECT_THROW(schema_grammar(R"({"type":"number","multipleOf":0.5})"), SchemaError);
}

TEST(JsonSchemaGrammar, LeftRecursiveRefIsAnError) {
  EXPECT_THROW(schema_grammar(R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})"), GrammarError);
}

}  // namespace
}  // namespace deltaserve::runtime::grammar
