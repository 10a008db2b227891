#include "runtime/grammar/constraint_grammars.h"

#include <set>
#include <vector>

#include "runtime/grammar/json_primitives.h"

namespace deltaserve::runtime::grammar {
namespace {

// root := ws{0,2} body
std::shared_ptr<const Grammar> finish_with_lead(std::shared_ptr<Grammar> g, JsonPrimitives& json, uint32_t body) {
  const uint32_t root = g->add_rule("root");
  Grammar::Sequence s = json.repeat(ByteSet::of(" \t\n\r"), 0, 2);
  s.push_back(Grammar::call(body));
  g->add_alternative(root, s);
  g->set_root(root);
  g->finish();
  return g;
}

bool string_typed(const SchemaJson& schema) {
  if (!schema.is_object()) return false;
  const auto type = schema.find("type");
  if (type == schema.end()) return false;
  if (type->is_string()) return *type == "string";
  if (type->is_array()) {
    for (const SchemaJson& t : *type) {
      if (t == "string") return true;
    }
  }
  return false;
}

void check_xml_name(const std::string& name, const std::string& path) {
  if (name.empty() || name.find_first_of("<>\n") != std::string::npos)
    throw SchemaError(path + ": the name '" + name + "' cannot be written in the XML call format");
}

// "<function=NAME>\n" params "</function>\n" for one tool.
uint32_t function_rule(Grammar& g, JsonPrimitives& json, const SchemaJson& tool, const std::string& path) {
  const SchemaJson& fn = tool.at("function");
  const std::string name = fn.at("name").get<std::string>();
  check_xml_name(name, path + ".function.name");
  const auto params_it = fn.find("parameters");
  const SchemaJson params = params_it == fn.end() || params_it->is_null() ? SchemaJson::object() : *params_it;
  const std::string params_path = path + ".function.parameters";
  const auto strict = fn.find("strict");
  JsonSchemaCompiler compiler(g, json, params, strict != fn.end() && strict->is_boolean() && strict->get<bool>());
  if (!params.is_object()) throw SchemaError(params_path + ": must be an object schema");
  if (params.contains("type") && params["type"] != "object")
    throw SchemaError(params_path + ".type: tool parameters must be of type object");
  compiler.value(params, params_path);  // validates the whole schema (keywords, required, refs)
  const SchemaJson props = params.value("properties", SchemaJson::object());
  std::set<std::string> required;
  for (const SchemaJson& r : params.value("required", SchemaJson::array())) required.insert(r.get<std::string>());
  // Built from the last parameter back: next = the parameters after this one.
  uint32_t next = g.add_rule("params_end");
  g.add_alternative(next, {});
  std::vector<std::pair<std::string, const SchemaJson*>> list;
  for (const auto& [pname, sub] : props.items()) list.emplace_back(pname, &sub);
  for (size_t i = list.size(); i-- > 0;) {
    const std::string& pname = list[i].first;
    const std::string ppath = params_path + ".properties." + pname;
    check_xml_name(pname, ppath);
    const SchemaJson& sub = *list[i].second;
    const uint32_t value = string_typed(sub) ? compiler.raw_string(sub, ppath) : compiler.value(sub, ppath);
    const uint32_t cur = g.add_rule("param_" + pname);
    Grammar::Sequence s = g.literal("<parameter=" + pname + ">\n");
    s.push_back(Grammar::call(value));
    g.append_literal(s, "\n</parameter>\n");
    s.push_back(Grammar::call(next));
    g.add_alternative(cur, s);
    if (!required.contains(pname)) g.add_alternative(cur, {Grammar::call(next)});
    next = cur;
  }
  const uint32_t r = g.add_rule("function_" + name);
  Grammar::Sequence s = g.literal("<function=" + name + ">\n");
  s.push_back(Grammar::call(next));
  g.append_literal(s, "</function>\n");
  g.add_alternative(r, s);
  return r;
}

}  // namespace

std::shared_ptr<const Grammar> json_object_grammar() {
  auto g = std::make_shared<Grammar>();
  JsonPrimitives json(*g);
  return finish_with_lead(g, json, json.any_object());
}

std::shared_ptr<const Grammar> json_schema_grammar(const SchemaJson& schema, bool strict) {
  auto g = std::make_shared<Grammar>();
  JsonPrimitives json(*g);
  JsonSchemaCompiler compiler(*g, json, schema, strict);
  const uint32_t body = compiler.value(schema, "schema");
  return finish_with_lead(g, json, body);
}

std::shared_ptr<const Grammar> tool_call_grammar(const SchemaJson& tools, const std::optional<std::string>& only_tool,
                                                 bool parallel) {
  if (!tools.is_array() || tools.empty()) throw SchemaError("tools: forcing a tool call needs at least one tool");
  auto g = std::make_shared<Grammar>();
  JsonPrimitives json(*g);
  const uint32_t functions = g->add_rule("functions");
  for (size_t i = 0; i < tools.size(); ++i) {
    const SchemaJson& tool = tools[i];
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
        !tool["function"].contains("name") || !tool["function"]["name"].is_string())
      throw SchemaError("tools[" + std::to_string(i) + "]: expected {type: function, function: {name, parameters}}");
    if (only_tool && tool["function"]["name"] != *only_tool) continue;
    g->add_alternative(functions, {Grammar::call(function_rule(*g, json, tool, "tools[" + std::to_string(i) + "]"))});
  }
  if (g->alternatives(functions).empty()) throw SchemaError("tool_choice: no tool named '" + only_tool.value_or("") + "'");
  const uint32_t call = g->add_rule("tool_call");
  Grammar::Sequence s = g->literal("<tool_call>\n");
  s.push_back(Grammar::call(functions));
  g->append_literal(s, "</tool_call>");
  g->add_alternative(call, s);
  // tool_calls := call ("\n" tool_calls)?  (right recursion: a tail call, no stack growth).
  // Only the model ends a parallel list (an end id is allowed after every call); a model that
  // keeps calling runs to max_tokens, which is the client's choice of parallel_tool_calls.
  const uint32_t calls = g->add_rule("tool_calls");
  g->add_alternative(calls, {Grammar::call(call)});
  if (parallel) {
    Grammar::Sequence more = {Grammar::call(call)};
    g->append_literal(more, "\n");
    more.push_back(Grammar::call(calls));
    g->add_alternative(calls, more);
  }
  return finish_with_lead(g, json, calls);
}

}  // namespace deltaserve::runtime::grammar
