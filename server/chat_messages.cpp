#include "server/chat_messages.h"

#include "server/api_error.h"
#include "server/json_fields.h"

namespace deltaserve::server {
namespace {

// String content, or text parts joined. Parts of other types (images, audio) are refused:
// the served models are text-only.
std::string content_text(const nlohmann::json& content, const std::string& path) {
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

nlohmann::json normalize_tool_call(const nlohmann::json& call, const std::string& path) {
  JsonFields f(call, path);
  nlohmann::json out = nlohmann::json::object();
  if (const auto id = f.string("id")) out["id"] = *id;
  const auto type = f.string("type").value_or("function");
  if (type != "function") {
    throw ApiException{invalid_value(f.param("type"), "only 'function' tool calls are supported.")};
  }
  out["type"] = "function";
  const nlohmann::json* function = f.object("function");
  if (!function) throw ApiException{missing_parameter(f.param("function"))};
  JsonFields fn(*function, f.param("function"));
  const auto name = fn.string("name");
  if (!name) throw ApiException{missing_parameter(fn.param("name"))};
  nlohmann::json arguments = nlohmann::json::object();
  if (const nlohmann::json* args = fn.get("arguments")) {
    if (args->is_string()) {
      // Templates want a mapping; a string that is not a JSON object stays a string.
      nlohmann::json parsed = nlohmann::json::parse(args->get<std::string>(), nullptr, false);
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

nlohmann::json normalize_message(const nlohmann::json& message, const std::string& path) {
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
  nlohmann::json out = {{"role", role}};
  const nlohmann::json* content = f.get("content");
  if (content) {
    out["content"] = content_text(*content, f.param("content"));
  } else if (role != "assistant") {
    throw ApiException{missing_parameter(f.param("content"))};
  } else {
    out["content"] = "";
  }
  if (const auto name = f.string("name")) out["name"] = *name;
  if (role == "assistant") {
    auto reasoning = f.string("reasoning_content");
    if (!reasoning) reasoning = f.string("reasoning");
    if (reasoning) out["reasoning_content"] = *reasoning;
    if (const nlohmann::json* calls = f.array("tool_calls")) {
      nlohmann::json list = nlohmann::json::array();
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

nlohmann::json normalize_messages(const nlohmann::json& messages, const std::string& path) {
  if (!messages.is_array()) {
    throw ApiException{invalid_type(path, std::string("expected an array of messages, got ") +
                                              json_type_name(messages) + ".")};
  }
  if (messages.empty()) {
    throw ApiException{invalid_value(path, "at least one message is required.")};
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    out.push_back(normalize_message(messages[i], element_path(path, i)));
  }
  return out;
}

nlohmann::json normalize_tools(const nlohmann::json* tools, const std::string& path) {
  if (!tools) return nullptr;
  if (!tools->is_array()) {
    throw ApiException{invalid_type(path, std::string("expected an array of tools, got ") +
                                              json_type_name(*tools) + ".")};
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    JsonFields f((*tools)[i], element_path(path, i));
    const auto type = f.string("type");
    if (type != "function") {
      throw ApiException{invalid_value(f.param("type"), "only 'function' tools are supported.")};
    }
    const nlohmann::json* function = f.object("function");
    if (!function) throw ApiException{missing_parameter(f.param("function"))};
    JsonFields fn(*function, f.param("function"));
    const auto name = fn.string("name");
    if (!name || name->empty()) throw ApiException{missing_parameter(fn.param("name"))};
    nlohmann::json tool_fn = {{"name", *name}};
    if (const auto description = fn.string("description")) tool_fn["description"] = *description;
    if (const nlohmann::json* parameters = fn.object("parameters")) tool_fn["parameters"] = *parameters;
    if (const auto strict = fn.boolean("strict")) tool_fn["strict"] = *strict;
    fn.reject_unknown();
    f.reject_unknown();
    out.push_back({{"type", "function"}, {"function", std::move(tool_fn)}});
  }
  return out;
}

nlohmann::json normalize_tool_choice(const nlohmann::json* tool_choice, const nlohmann::json& tools,
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
  const nlohmann::json* function = f.object("function");
  if (!function) throw ApiException{missing_parameter(f.param("function"))};
  JsonFields fn(*function, f.param("function"));
  const auto name = fn.string("name");
  if (!name) throw ApiException{missing_parameter(fn.param("name"))};
  fn.reject_unknown();
  f.reject_unknown();
  bool found = false;
  if (tools.is_array()) {
    for (const nlohmann::json& t : tools) found = found || t["function"]["name"] == *name;
  }
  if (!found) {
    throw ApiException{invalid_value(fn.param("name"), "no tool named '" + *name + "' in 'tools'.")};
  }
  return *tool_choice;
}

}  // namespace deltaserve::server
