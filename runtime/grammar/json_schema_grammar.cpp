#include "runtime/grammar/json_schema_grammar.h"

#include <set>
#include <vector>

#include "runtime/grammar/json_string_formats.h"

namespace deltaserve::runtime::grammar {
namespace {

constexpr int kMaxSchemaDepth = 64;

const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type",     "properties", "required", "additionalProperties", "items",   "enum",     "const",
      "anyOf",    "$ref",       "$defs",    "definitions",          "title",   "description",
      "default",  "examples",   "$schema",  "$id",                  "$comment", "strict",
      // Annotations like title: they constrain nothing (Pydantic writes `deprecated`).
      "deprecated", "readOnly", "writeOnly",
      // Assertions of one type, enforced with a type beside them (value_keywords()).
      "minItems", "maxItems", "minLength", "maxLength", "format", "pattern", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  return k;
}

// Keywords that bound a value of one type: only a typed schema enforces them.
const std::set<std::string>& value_keywords() {
  static const std::set<std::string> k = {"minItems", "maxItems", "minLength", "maxLength", "format", "pattern",
                                          "minimum",  "maximum",  "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  return k;
}

}  // namespace

std::string schema_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

bool unknown_format(const SchemaJson& schema) {
  const auto f = schema.find("format");
  return f != schema.end() && f->is_string() && !known_string_format(f->get<std::string>());
}

std::string json_literal(const SchemaJson& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
}

uint32_t JsonSchemaCompiler::value(const SchemaJson& schema, const std::string& path) {
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return json_.any_value();
    throw SchemaError(path + ": the schema false accepts nothing");
  }
  if (!schema.is_object()) throw SchemaError(path + ": a schema must be an object");
  if (++depth_ > kMaxSchemaDepth) throw SchemaError(path + ": the schema nests too deeply");
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{depth_};
  for (const auto& [key, unused] : schema.items()) {
    if (!known_keywords().contains(key))
      throw SchemaError(schema_path(path, key) + ": '" + key +
                        "' is not supported (constrained output takes the strict-mode subset: type, properties, "
                        "required, additionalProperties false, items, minItems, maxItems, enum, const, anyOf, "
                        "$ref/$defs, minLength, maxLength, format, pattern, minimum, maximum, exclusiveMinimum, "
                        "exclusiveMaximum, multipleOf)");
    if (key == "format" && unknown_format(schema)) {
      // Checked before the combination rules below, so the 400 names the real problem.
      if (!strict_) continue;  // an annotation: constrains nothing
      throw SchemaError(schema_path(path, key) + ": format '" + schema["format"].get<std::string>() +
                        "' is not supported in strict mode (supported: " + kSupportedStringFormats +
                        "; without strict: true an unknown format is an annotation and constrains nothing)");
    }
    if (value_keywords().contains(key)) {
      for (const char* other : {"$ref", "const", "enum", "anyOf"}) {
        if (schema.contains(other))
          throw SchemaError(schema_path(path, key) + ": '" + key + "' cannot be combined with '" + other +
                            "' (it would not be enforced)");
      }
      if (!schema.contains("type"))
        throw SchemaError(schema_path(path, key) + ": '" + key + "' needs a 'type' beside it to be enforced");
    }
  }
  if (const auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string()) throw SchemaError(schema_path(path, "$ref") + ": must be a string");
    return reference(ref->get<std::string>(), schema_path(path, "$ref"));
  }
  if (const auto c = schema.find("const"); c != schema.end()) return literals(SchemaJson::array({*c}), path);
  if (const auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array() || e->empty()) throw SchemaError(schema_path(path, "enum") + ": must be a non-empty array");
    return literals(*e, schema_path(path, "enum"));
  }
  if (const auto any = schema.find("anyOf"); any != schema.end()) return alternatives_of(*any, schema_path(path, "anyOf"));
  const auto type = schema.find("type");
  if (type == schema.end()) {
    // No type: an object schema when it names properties, else any JSON value.
    if (schema.contains("properties") || schema.contains("required")) return object(schema, path);
    if (schema.contains("items")) return array(schema, path);
    return json_.any_value();
  }
  if (type->is_string()) return typed(schema, type->get<std::string>(), path);
  if (!type->is_array() || type->empty())
    throw SchemaError(schema_path(path, "type") + ": must be a type name or a non-empty list of them");
  const uint32_t r = g_.add_rule("types");
  for (const SchemaJson& t : *type) {
    if (!t.is_string()) throw SchemaError(schema_path(path, "type") + ": must list type names");
    g_.add_alternative(r, {Grammar::call(typed(schema, t.get<std::string>(), path))});
  }
  return r;
}

uint32_t JsonSchemaCompiler::typed(const SchemaJson& schema, const std::string& type, const std::string& path) {
  if (type == "string") return string_value(schema, path, false);
  if (type == "number") return number_value(schema, path);
  if (type == "integer") return integer_value(schema, path);
  if (type == "boolean") return json_.boolean();
  if (type == "null") return json_.null();
  if (type == "object") return object(schema, path);
  if (type == "array") return array(schema, path);
  throw SchemaError(schema_path(path, "type") + ": unknown type '" + type + "'");
}

uint32_t JsonSchemaCompiler::object(const SchemaJson& schema, const std::string& path) {
  const auto props_it = schema.find("properties");
  const SchemaJson empty = SchemaJson::object();
  const SchemaJson& props = props_it == schema.end() ? empty : *props_it;
  if (!props.is_object()) throw SchemaError(schema_path(path, "properties") + ": must be an object");
  std::set<std::string> required;
  if (const auto req = schema.find("required"); req != schema.end()) {
    if (!req->is_array()) throw SchemaError(schema_path(path, "required") + ": must be an array of property names");
    for (const SchemaJson& name : *req) {
      if (!name.is_string() || !props.contains(name.get<std::string>()))
        throw SchemaError(schema_path(path, "required") + ": " + json_literal(name) + " is not a property in 'properties'");
      required.insert(name.get<std::string>());
    }
  }
  bool additional = false;
  if (const auto add = schema.find("additionalProperties"); add != schema.end()) {
    if (!add->is_boolean())
      throw SchemaError(schema_path(path, "additionalProperties") + ": only false is supported (or true without properties)");
    additional = add->get<bool>();
  } else {
    additional = props_it == schema.end();  // {"type": "object"} alone: any object
  }
  if (additional) {
    if (!props.empty())
      throw SchemaError(schema_path(path, "additionalProperties") + ": must be false when properties are listed");
    return json_.any_object();
  }
  // Members in schema order. rest[i][more]: properties i.. still to come, `more` = one was
  // already written (the next needs a comma). Built from the last property back.
  std::vector<std::pair<std::string, uint32_t>> members;
  const std::string props_path = schema_path(path, "properties");
  for (const auto& [name, sub] : props.items()) members.emplace_back(name, value(sub, schema_path(props_path, name)));
  const size_t n = members.size();
  uint32_t next[2] = {g_.add_rule("members_end"), 0};
  g_.add_alternative(next[0], {});
  next[1] = next[0];
  for (size_t i = n; i-- > 0;) {
    uint32_t cur[2];
    for (int more = 0; more < 2; ++more) {
      cur[more] = g_.add_rule("members_" + members[i].first);
      Grammar::Sequence s;
      if (more) {
        g_.append_literal(s, ",");
        s.push_back(Grammar::call(json_.optional_space()));
      }
      g_.append_literal(s, json_literal(SchemaJson(members[i].first)) + ":");
      s.push_back(Grammar::call(json_.optional_space()));
      s.push_back(Grammar::call(members[i].second));
      s.push_back(Grammar::call(next[1]));
      g_.add_alternative(cur[more], s);
      if (!required.contains(members[i].first)) g_.add_alternative(cur[more], {Grammar::call(next[more])});
    }
    next[0] = cur[0];
    next[1] = cur[1];
  }
  const uint32_t r = g_.add_rule("object");
  Grammar::Sequence s = g_.literal("{");
  s.push_back(Grammar::call(next[0]));
  g_.append_literal(s, "}");
  g_.add_alternative(r, s);
  return r;
}

uint32_t JsonSchemaCompiler::array(const SchemaJson& schema, const std::string& path) {
  const auto items = schema.find("items");
  const uint32_t item = items == schema.end() ? json_.any_value() : value(*items, schema_path(path, "items"));
  const std::optional<int> min_items = count_keyword(schema, "minItems", kMaxItemsBound, path);
  const std::optional<int> max_items = count_keyword(schema, "maxItems", kMaxItemsBound, path);
  const int lo = min_items.value_or(0);
  if (max_items && *max_items < lo) throw SchemaError(schema_path(path, "maxItems") + ": is below minItems");
  // more: the items after the first, from lo - 1 (required) up to max - 1 (or unbounded).
  uint32_t more = g_.add_rule("items_end");
  g_.add_alternative(more, {});
  auto one_more = [&](uint32_t next, bool optional) {
    const uint32_t r = g_.add_rule("items_more");  // ',' sp item next
    g_.add_alternative(r, {g_.bytes(ByteSet::of(",")), Grammar::call(json_.optional_space()), Grammar::call(item),
                           Grammar::call(next == UINT32_MAX ? r : next)});
    if (optional) g_.add_alternative(r, {});
    return r;
  };
  if (!max_items) {
    more = one_more(UINT32_MAX, true);  // (',' sp item)*
  } else {
    for (int k = *max_items - 1; k > std::max(lo - 1, 0); --k) more = one_more(more, true);
  }
  for (int k = std::max(lo - 1, 0); k > 0; --k) more = one_more(more, false);
  const uint32_t r = g_.add_rule("array");
  if (lo == 0) g_.add_alternative(r, g_.literal("[]"));
  if (!max_items || *max_items > 0)
    g_.add_alternative(r, {g_.bytes(ByteSet::of("[")), Grammar::call(item), Grammar::call(more),
                           g_.bytes(ByteSet::of("]"))});
  return r;
}

uint32_t JsonSchemaCompiler::literals(const SchemaJson& values, const std::string& path) {
  const uint32_t r = g_.add_rule("literals");
  for (const SchemaJson& v : values) {
    std::string text;
    try {
      text = json_literal(v);
    } catch (const nlohmann::json::exception&) {
      throw SchemaError(path + ": a value is not valid UTF-8");
    }
    g_.add_alternative(r, g_.literal(text));
  }
  return r;
}

uint32_t JsonSchemaCompiler::alternatives_of(const SchemaJson& schemas, const std::string& path) {
  if (!schemas.is_array() || schemas.empty()) throw SchemaError(path + ": must be a non-empty array of schemas");
  const uint32_t r = g_.add_rule("any_of");
  for (size_t i = 0; i < schemas.size(); ++i) {
    g_.add_alternative(r, {Grammar::call(value(schemas[i], path + "[" + std::to_string(i) + "]"))});
  }
  return r;
}

uint32_t JsonSchemaCompiler::reference(const std::string& ref, const std::string& path) {
  if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#') throw SchemaError(path + ": only local references (\"#/$defs/...\") are supported");
  const SchemaJson* target = nullptr;
  try {
    target = &root_.at(nlohmann::ordered_json::json_pointer(ref.substr(1)));
  } catch (const nlohmann::json::exception&) {
    throw SchemaError(path + ": '" + ref + "' does not resolve in the schema");
  }
  // The rule exists before its body is compiled so a recursive reference finds it.
  const uint32_t r = g_.add_rule("ref " + ref);
  refs_[ref] = r;
  g_.add_alternative(r, {Grammar::call(value(*target, path + "(" + ref + ")"))});
  return r;
}

uint32_t JsonSchemaCompiler::raw_string(const SchemaJson& schema, const std::string& path) {
  if (!schema.is_object()) throw SchemaError(path + ": a schema must be an object");
  const auto e = schema.find("enum");
  const auto c = schema.find("const");
  if (e == schema.end() && c == schema.end()) {
    value(schema, path);  // validates the keywords
    return string_value(schema, path, true);
  }
  const SchemaJson values = c != schema.end() ? SchemaJson::array({*c}) : *e;
  if (!values.is_array() || values.empty()) throw SchemaError(path + ".enum: must be a non-empty array");
  const uint32_t r = g_.add_rule("raw_literals");
  for (const SchemaJson& v : values) {
    if (!v.is_string()) continue;  // the XML value of a string parameter is always a string
    const std::string& text = v.get_ref<const std::string&>();
    if (text.find('<') != std::string::npos)
      throw SchemaError(path + ": enum value " + json_literal(v) + " holds '<', which the XML call format cannot carry");
    g_.add_alternative(r, g_.literal(text));
  }
  if (g_.alternatives(r).empty()) throw SchemaError(path + ": no string value in enum/const");
  return r;
}

}  // namespace deltaserve::runtime::grammar
