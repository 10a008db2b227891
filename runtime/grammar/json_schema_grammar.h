// JSON Schema (the subset OpenAI's strict structured outputs allow) -> grammar rules.
//
// Accepted keywords: type (a name or a list of names: object, array, string, number,
// integer, boolean, null), properties, required, additionalProperties (absent or false; true
// only on an object without properties, which then takes any members), items, enum, const,
// anyOf, $ref (local: "#", "#/$defs/...", "#/definitions/..."; recursion allowed), $defs /
// definitions, and the annotations title, description, default, examples, $schema, $id,
// $comment, strict. With a type beside them (and no enum, const, anyOf or $ref): minItems /
// maxItems on arrays (at most kMaxItemsBound); on strings minLength / maxLength (code
// points, at most kMaxStringLengthBound), pattern (json_regex.h; lengths may join it) or
// format (json_string_formats.h; alone; an unknown format is a SchemaError only when strict,
// else an annotation); minimum / maximum / exclusiveMinimum /
// exclusiveMaximum on integers (any) and numbers (integral bounds; json_number_bounds.h);
// multipleOf on integers and numbers (an integer 1..kMaxMultipleOf; above 1, without bounds).
// Any other keyword or form (oneOf, multipleOf 0.5, ...) is a SchemaError: the output could
// not be guaranteed to validate.
//
// Objects emit their properties in the schema's order; a required property is always
// present, an optional one may be left out. Whitespace follows json_primitives.h.
//
// One compiler per grammar under construction; single thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/json_primitives.h"

namespace deltaserve::runtime::grammar {

using SchemaJson = nlohmann::ordered_json;

// Caps on counts that unroll into the grammar (one rule per step), so a schema cannot make
// it huge; a larger value is a SchemaError.
inline constexpr int kMaxItemsBound = 1024;
inline constexpr int kMaxStringLengthBound = 4096;

// A schema the compiler refuses; what() names the place ("properties.age: ...") for a 400.
class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonSchemaCompiler {
 public:
  // `root`: the document $ref "#..." pointers resolve against; it must outlive the compiler.
  // `strict`: the client asked for strict mode (strict: true), where an unknown `format` is a
  // SchemaError; otherwise it is an annotation (JSON Schema's default for format) and the
  // string is constrained as if the keyword were absent.
  JsonSchemaCompiler(Grammar& g, JsonPrimitives& json, const SchemaJson& root, bool strict)
      : g_(g), json_(json), root_(root), strict_(strict) {}

  // A rule matching exactly the JSON texts (compact) that validate against `schema`.
  // `path` names the schema in error messages. Throws SchemaError.
  uint32_t value(const SchemaJson& schema, const std::string& path);
  // A Qwen XML parameter value of a string-typed parameter: the raw text (no quotes, no
  // escapes) of a string the schema accepts: an enum / const of strings, or any text.
  uint32_t raw_string(const SchemaJson& schema, const std::string& path);

 private:
  uint32_t typed(const SchemaJson& schema, const std::string& type, const std::string& path);
  uint32_t object(const SchemaJson& schema, const std::string& path);
  uint32_t array(const SchemaJson& schema, const std::string& path);
  // json_schema_scalars.cpp. raw: a Qwen XML parameter's raw text instead of a JSON string.
  uint32_t string_value(const SchemaJson& schema, const std::string& path, bool raw);
  uint32_t integer_value(const SchemaJson& schema, const std::string& path);
  uint32_t number_value(const SchemaJson& schema, const std::string& path);
  uint32_t literals(const SchemaJson& values, const std::string& path);
  uint32_t reference(const std::string& ref, const std::string& path);
  uint32_t alternatives_of(const SchemaJson& schemas, const std::string& path);

  Grammar& g_;
  JsonPrimitives& json_;
  const SchemaJson& root_;
  const bool strict_;
  std::map<std::string, uint32_t> refs_;  // "$ref" target -> its rule (made before its body)
  int depth_ = 0;                         // nesting of the schema document itself
};

// The path of `key` inside the schema at `path` (error messages name the field).
std::string schema_path(const std::string& path, const std::string& key);

// A count keyword (minLength, maxItems, ...) of `schema`: an integer 0..cap, or absent.
std::optional<int> count_keyword(const SchemaJson& schema, const char* key, int cap, const std::string& path);

// The schema's format is a string that string_format() does not know (value() refuses it when
// strict, else it constrains nothing).
bool unknown_format(const SchemaJson& schema);

// The compact JSON text of a value as the grammar spells literals (UTF-8 kept as is).
std::string json_literal(const SchemaJson& value);

}  // namespace deltaserve::runtime::grammar
