#include "server/chat_messages.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace deltaserve::server {
namespace {

// String content, or text parts joined. Parts of other types (images, audio) are refused:
// the served models are text-only.
std::string content_text(const RequestJson& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw ApiException{invalid_type(path, std::string("expected a string or an array of content "
                                                      "parts, got ") + json_type_name(content) + ".")};
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_path = element_path(path, i);
    JsonFields part(content[i], part_path);
    const auto type = part.string("type");
    if (!type) throw ApiException{missing_parameter(part.param("type"))};
    if (*type != "text" && *type != "input_text") {
      throw ApiException{unsupported_value(part.param("type"), "content part type '" + *type +
                                                                   "' is not supported; only text.")};
    }
    const auto part_text = part.string("text");
    if (!part_text) throw ApiException{missing_parameter(part.param("text"))};
    part.accept("cache_control");
    part.reject_unknown();
    text += *part_text;
  }
  return text;
}

RequestJson normalize_tool_call(const RequestJson& call, const std::string& path) {
  JsonFields f(call, path);
  RequestJson out = RequestJson::object();
  if (const auto id = f.string("id")) out["id"] = *id;
  const auto type = f.string("type").value_or("function");
  if (type != "function") {
    throw ApiException{invalid_value(f.param("type"), "only 'function' tool calls are supported.")};
  }
  out["type"] = "function";
  const RequestJson* function = f.object("function");
  if (!function) throw ApiException{missing_parameter(f.param("function"))};
  JsonFields fn(*function, f.param("function"));
  const auto name = fn.string("name");
  if (!name) throw ApiException{missing_parameter(fn.param("name"))};
  RequestJson arguments = RequestJson::object();
  if (const RequestJson* args = fn.get("arguments")) {
    if (args->is_string()) {
      // Templates want a mapping; a string that is not a JSON object stays a string.
      RequestJson parsed;
      try {
        parsed = parse_request_json(args->get<std::string>());
      } catch (const ApiException&) {  // not JSON: stays a string
      }
      arguments = parsed.is_object() ? parsed : *args;
    } else if (args->is_object()) {
      arguments = *args;
    } else {
      throw ApiException{invalid_type(fn.param("arguments"), "expected a JSON string or an object.")};
    }
  }
  fn.reject_unknown();
  f.reject_unknown();
  out["function"] = {{"name", *name}, {"arguments", std::move(arguments)}};
  return out;
}

RequestJson normalize_message(const RequestJson& message, const std::string& path) {
  JsonFields f(message, path);
  const auto role_in = f.string("role");
  if (!role_in) throw ApiException{missing_parameter(f.param("role"))};
  std::string role = *role_in;
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    throw ApiException{invalid_value(f.param("role"),
                                     "'" + *role_in + "' is not one of system, developer, user, "
                                     "assistant, tool.")};
  }
  RequestJson out = {{"role", role}};
  const RequestJson* content = f.get("content");
  if (content) {
    out["content"] = content_text(*content, f.param("content"));
  } else if (role != "assistant") {
    throw ApiException{missing_parameter(f.param("content"))};
  } else {
    out["content"] = "";
  }
  if (const auto name = f.string("name")) out["name"] = *name;
  if (role == "assistant") {
    // Both names may come together (this server's --reasoning-field both writes both, and a
    // client sends its message back as it came); reasoning_content wins.
    const auto reasoning_content = f.string("reasoning_content");
    const auto reasoning = f.string("reasoning");
    if (reasoning_content || reasoning) out["reasoning_content"] = reasoning_content ? *reasoning_content : *reasoning;
    if (const RequestJson* calls = f.array("tool_calls")) {
      RequestJson list = RequestJson::array();
      for (size_t i = 0; i < calls->size(); ++i) {
        list.push_back(normalize_tool_call((*calls)[i], element_path(f.param("tool_calls"), i)));
      }
      out["tool_calls"] = std::move(list);
    }
    f.accept("refusal");
    f.accept("annotations");
  }
  if (role == "tool") {
    if (const auto id = f.string("tool_call_id")) out["tool_call_id"] = *id;
  }
  f.reject_unknown();
  return out;
}

}  // namespace

RequestJson normalize_messages(const RequestJson& messages, const std::string& path,
                               std::string* late_system) {
  if (!messages.is_array()) {
    throw ApiException{invalid_type(path, std::string("expected an array of messages, got ") +
                                              json_type_name(messages) + ".")};
  }
  if (messages.empty()) {
    throw ApiException{invalid_value(path, "at least one message is required.")};
  }
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    RequestJson m = normalize_message(messages[i], element_path(path, i));
    // Leading system / developer messages (agents send a framework's and the user's) become
    // one: chat templates, Qwen's among them, take one system message, first, and fail on a
    // second. A named one stays apart (the name would be lost).
    const bool joins = out.size() == 1 && out[0]["role"] == "system" && m["role"] == "system" &&
                       !out[0].contains("name") && !m.contains("name");
    if (joins) {
      std::string& text = out[0]["content"].get_ref<std::string&>();
      text += (text.empty() ? "" : "\n\n") + m["content"].get<std::string>();
    } else {
      if (late_system && late_system->empty() && !out.empty() && m["role"] == "system") {
        *late_system = element_path(path, i);
      }
      out.push_back(std::move(m));
    }
  }
  return out;
}

namespace {

// A tool's parameters schema, checked for what makes it no JSON Schema at all (a schema that
// is not an object or boolean, an unknown type name), since OpenAI and Anthropic refuse such
// tools with a 400 whatever the tool_choice. Keywords beyond the constrained subset are not
// checked here: with tool_choice auto the schema only reaches the prompt.
void check_tool_schema(const RequestJson& schema, const std::string& path) {
  if (schema.is_boolean()) return;
  if (!schema.is_object()) {
    throw ApiException{invalid_type(path, std::string("expected a JSON Schema (an object), got ") +
                                              json_type_name(schema) + ".")};
  }
  static constexpr std::string_view kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
  const auto known = [](const RequestJson& t) {
    return t.is_string() && std::find(std::begin(kTypes), std::end(kTypes), t.get_ref<const std::string&>()) != std::end(kTypes);
  };
  if (const auto type = schema.find("type"); type != schema.end()) {
    const bool ok = type->is_array() ? std::all_of(type->begin(), type->end(), known) : known(*type);
    if (!ok) {
      throw ApiException{invalid_value(path + ".type", type->dump() + " is not a JSON Schema type (object, array, "
                                                                     "string, number, integer, boolean, null).")};
    }
  }
  for (const char* key : {"properties", "$defs", "definitions"}) {
    const auto map = schema.find(key);
    if (map == schema.end() || !map->is_object()) continue;
    for (const auto& [name, sub] : map->items()) check_tool_schema(sub, path + "." + key + "." + name);
  }
  if (const auto items = schema.find("items"); items != schema.end()) {
    if (items->is_array()) {  // draft-07's tuple form
      for (size_t i = 0; i < items->size(); ++i) check_tool_schema((*items)[i], element_path(path + ".items", i));
    } else {
      check_tool_schema(*items, path + ".items");
    }
  }
  for (const char* key : {"additionalProperties", "not"}) {
    const auto sub = schema.find(key);
    if (sub != schema.end() && sub->is_object()) check_tool_schema(*sub, path + "." + key);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    const auto list = schema.find(key);
    if (list == schema.end() || !list->is_array()) continue;
    for (size_t i = 0; i < list->size(); ++i) check_tool_schema((*list)[i], element_path(path + "." + key, i));
  }
}

}  // namespace

RequestJson normalize_tools(const RequestJson* tools, const std::string& path) {
  if (!tools) return nullptr;
  if (!tools->is_array()) {
    throw ApiException{invalid_type(path, std::string("expected an array of tools, got ") +
                                              json_type_name(*tools) + ".")};
  }
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    JsonFields f((*tools)[i], element_path(path, i));
    const auto type = f.string("type");
    if (type != "function") {
      throw ApiException{invalid_value(f.param("type"), "only 'function' tools are supported.")};
    }
    const RequestJson* function = f.object("function");
    if (!function) throw ApiException{missing_parameter(f.param("function"))};
    JsonFields fn(*function, f.param("function"));
    const auto name = fn.string("name");
    if (!name || name->empty()) throw ApiException{missing_parameter(fn.param("name"))};
    fn.string("description");
    if (const RequestJson* parameters = fn.object("parameters")) check_tool_schema(*parameters, fn.param("parameters"));
    fn.boolean("strict");
    fn.reject_unknown();
    f.reject_unknown();
    // Valid: copied in the client's key order (templates `tojson` them), nulls left out.
    RequestJson tool_fn = RequestJson::object();
    for (const auto& [key, value] : function->items()) {
      if (!value.is_null()) tool_fn[key] = value;
    }
    RequestJson tool = RequestJson::object();
    for (const auto& [key, value] : (*tools)[i].items()) {
      if (key == "function") {
        tool[key] = std::move(tool_fn);
      } else if (!value.is_null()) {
        tool[key] = value;
      }
    }
    out.push_back(std::move(tool));
  }
  return out;
}

RequestJson normalize_tool_choice(const RequestJson* tool_choice, const RequestJson& tools,
                                     const std::string& path) {
  if (!tool_choice) return nullptr;
  if (tool_choice->is_string()) {
    const std::string choice = tool_choice->get<std::string>();
    if (choice != "none" && choice != "auto" && choice != "required") {
      throw ApiException{invalid_value(path, "'" + choice + "' is not one of none, auto, required.")};
    }
    if (choice == "required" && (tools.is_null() || tools.empty())) {
      throw ApiException{invalid_value(path, "'required' needs at least one tool in 'tools'.")};
    }
    return choice;
  }
  JsonFields f(*tool_choice, path);
  if (f.string("type") != "function") {
    throw ApiException{invalid_value(f.param("type"), "expected 'function'.")};
  }
  const RequestJson* function = f.object("function");
  if (!function) throw ApiException{missing_parameter(f.param("function"))};
  JsonFields fn(*function, f.param("function"));
  const auto name = fn.string("name");
  if (!name) throw ApiException{missing_parameter(fn.param("name"))};
  fn.reject_unknown();
  f.reject_unknown();
  require_named_tool(tools, *name, fn.param("name"));
  return *tool_choice;
}

void require_named_tool(const RequestJson& tools, const std::string& name, const std::string& param) {
  bool found = false;
  if (tools.is_array()) {
    for (const RequestJson& t : tools) found = found || t["function"]["name"] == name;
  }
  if (!found) throw ApiException{invalid_value(param, "no tool named '" + name + "' in 'tools'.")};
}

RequestJson normalize_response_format(const RequestJson* response_format, const std::string& path) {
  if (!response_format || response_format->is_null()) return nullptr;
  JsonFields f(*response_format, path);
  const std::optional<std::string> type = f.string("type");
  if (!type) throw ApiException{missing_parameter(f.param("type"))};
  if (*type == "json_schema") {
    const RequestJson* js = f.object("json_schema");
    if (!js) throw ApiException{missing_parameter(f.param("json_schema"))};
    JsonFields s(*js, f.param("json_schema"));
    (void)s.string("name");
    (void)s.string("description");
    (void)s.boolean("strict");
    if (!s.object("schema")) throw ApiException{missing_parameter(s.param("schema"))};
    s.reject_unknown();
  } else if (*type != "text" && *type != "json_object") {
    throw ApiException{invalid_value(f.param("type"), "'" + *type + "' is not one of text, json_object, json_schema.")};
  }
  f.reject_unknown();
  return *response_format;
}

}  // namespace deltaserve::server
