#include "server/anthropic_request.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>

#include "server/chat_messages.h"
#include "server/json_fields.h"

namespace deltaserve::server {
namespace {

// Text of a `content` given as a string or as text blocks (system, tool_result).
std::string text_of(const RequestJson& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw ApiException{invalid_type(path, std::string("expected a string or an array of text "
                                                      "blocks, got ") + json_type_name(content) + ".")};
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    JsonFields block(content[i], element_path(path, i));
    const auto type = block.string("type");
    if (!type) throw ApiException{missing_parameter(block.param("type"))};
    if (*type != "text") {
      throw ApiException{unsupported_value(block.param("type"), "block type '" + *type +
                                                                    "' is not supported here; only text.")};
    }
    const auto part = block.string("text");
    if (!part) throw ApiException{missing_parameter(block.param("text"))};
    block.accept("cache_control");
    block.accept("citations");
    block.reject_unknown();
    if (!text.empty()) text += "\n";
    text += *part;
  }
  return text;
}

void unsupported_block(JsonFields& block, const std::string& type) {
  if (type == "image" || type == "document" || type == "search_result") {
    throw ApiException{unsupported_value(block.param("type"), "'" + type + "' blocks are not "
                                                              "supported: the served model is text-only.")};
  }
  if (type == "server_tool_use" || type == "web_search_tool_result" || type == "mcp_tool_use" ||
      type == "mcp_tool_result" || type == "container_upload") {
    throw ApiException{unsupported_value(block.param("type"), "'" + type + "' blocks are not "
                                                              "supported: this server runs no tools itself.")};
  }
  throw ApiException{invalid_value(block.param("type"), "unknown content block type '" + type +
                                                            "'; expected text, thinking, "
                                                            "redacted_thinking, tool_use or tool_result.")};
}

// The tool blocks of one message, for the pairing check: ids with the param of each block.
struct MessageTools {
  std::string role;
  std::vector<std::pair<std::string, std::string>> uses;     // assistant tool_use: id, block
  std::vector<std::pair<std::string, std::string>> results;  // user tool_result: tool_use_id, its param
};

// One Anthropic message -> one or more chat messages appended to `out`. `last`: the request's
// final message (the only one that may be empty: an assistant prefill).
MessageTools translate_message(const RequestJson& message, const std::string& path, bool last, RequestJson& out) {
  MessageTools tools;
  JsonFields f(message, path);
  const auto role = f.string("role");
  if (!role) throw ApiException{missing_parameter(f.param("role"))};
  if (*role != "user" && *role != "assistant") {
    throw ApiException{invalid_value(f.param("role"), "'" + *role + "' is not one of user, assistant "
                                                      "(the system prompt goes in 'system').")};
  }
  tools.role = *role;
  const RequestJson* content = f.get("content");
  if (!content) throw ApiException{missing_parameter(f.param("content"))};
  f.reject_unknown();
  const bool empty = content->is_string() ? content->get_ref<const std::string&>().empty()
                                          : content->is_array() && content->empty();
  if (empty && !(last && *role == "assistant")) {
    throw ApiException{invalid_value(f.param("content"), "all messages must have non-empty content "
                                                         "except for the optional final assistant message.")};
  }
  if (content->is_string()) {
    out.push_back({{"role", *role}, {"content", content->get<std::string>()}});
    return tools;
  }
  if (!content->is_array()) {
    throw ApiException{invalid_type(f.param("content"), std::string("expected a string or an array "
                                                                    "of content blocks, got ") +
                                                            json_type_name(*content) + ".")};
  }
  std::string text;
  std::string thinking;
  bool has_text = false;
  RequestJson tool_calls = RequestJson::array();
  RequestJson tool_results = RequestJson::array();
  for (size_t i = 0; i < content->size(); ++i) {
    JsonFields block((*content)[i], element_path(f.param("content"), i));
    const auto type = block.string("type");
    if (!type) throw ApiException{missing_parameter(block.param("type"))};
    block.accept("cache_control");
    if (*type == "text") {
      const auto part = block.string("text");
      if (!part) throw ApiException{missing_parameter(block.param("text"))};
      block.accept("citations");
      text += *part;
      has_text = true;
    } else if (*type == "thinking" && *role == "assistant") {
      thinking += block.string("thinking").value_or("");
      block.accept("signature");
    } else if (*type == "redacted_thinking" && *role == "assistant") {
      block.accept("data");  // opaque to this server: dropped
    } else if (*type == "tool_use" && *role == "assistant") {
      const auto id = block.string("id");
      const auto name = block.string("name");
      if (!id) throw ApiException{missing_parameter(block.param("id"))};
      if (!name) throw ApiException{missing_parameter(block.param("name"))};
      const RequestJson* input = block.object("input");
      tools.uses.emplace_back(*id, block.param("id"));
      tool_calls.push_back({{"id", *id},
                            {"type", "function"},
                            {"function", {{"name", *name},
                                          {"arguments", input ? *input : RequestJson::object()}}}});
    } else if (*type == "tool_result" && *role == "user") {
      const auto id = block.string("tool_use_id");
      if (!id) throw ApiException{missing_parameter(block.param("tool_use_id"))};
      tools.results.emplace_back(*id, block.param("tool_use_id"));
      const RequestJson* result = block.get("content");
      std::string result_text = result ? text_of(*result, block.param("content")) : "";
      if (block.boolean("is_error").value_or(false)) result_text = "Error: " + result_text;
      tool_results.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result_text}});
    } else if (*type == "thinking" || *type == "redacted_thinking" || *type == "tool_use" ||
               *type == "tool_result") {
      throw ApiException{invalid_value(block.param("type"), "a '" + *type + "' block is not allowed "
                                                            "in a " + *role + " message.")};
    } else {
      unsupported_block(block, *type);
    }
    block.reject_unknown();
  }
  if (*role == "assistant") {
    RequestJson m = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) m["reasoning_content"] = thinking;
    if (!tool_calls.empty()) m["tool_calls"] = std::move(tool_calls);
    out.push_back(std::move(m));
    return tools;
  }
  // Tool results answer the previous turn's calls: they come first (Anthropic's rule too).
  for (RequestJson& r : tool_results) out.push_back(std::move(r));
  if (has_text || tool_results.empty()) out.push_back({{"role", "user"}, {"content", text}});
  return tools;
}

// Anthropic's pairing rule: the tool_use blocks of an assistant turn are answered, each, by a
// tool_result block of the next (user) turn, and a tool_result answers a tool_use of the turn
// before it. Consecutive messages of one role are one turn, as Anthropic merges them. A final
// assistant turn's calls need no answer yet. Without this check the template would render an
// answer to no call (or a call never answered) and the model would see a broken conversation.
void check_tool_pairing(const std::vector<MessageTools>& messages) {
  std::vector<std::pair<std::string, std::string>> open_uses;  // the previous assistant turn's
  size_t i = 0;
  while (i < messages.size()) {
    const std::string& role = messages[i].role;
    std::vector<std::pair<std::string, std::string>> uses;
    std::vector<std::pair<std::string, std::string>> results;
    const size_t turn = i;
    for (; i < messages.size() && messages[i].role == role; ++i) {
      uses.insert(uses.end(), messages[i].uses.begin(), messages[i].uses.end());
      results.insert(results.end(), messages[i].results.begin(), messages[i].results.end());
    }
    if (role == "assistant") {
      open_uses = std::move(uses);
      continue;
    }
    const auto answered = [&results](const std::string& id) {
      return std::any_of(results.begin(), results.end(), [&id](const auto& r) { return r.first == id; });
    };
    std::string missing;
    for (const auto& [id, param] : open_uses) {
      if (!answered(id)) missing += (missing.empty() ? "" : ", ") + id;
    }
    if (!missing.empty()) {
      throw ApiException{invalid_value(element_path("messages", turn),
                                       "tool_use ids were found without tool_result blocks immediately "
                                       "after: " + missing + ". Each tool_use block must have a "
                                       "corresponding tool_result block in the next message.")};
    }
    for (const auto& [id, param] : results) {
      const bool called = std::any_of(open_uses.begin(), open_uses.end(),
                                      [&id](const auto& u) { return u.first == id; });
      if (!called) {
        throw ApiException{invalid_value(param, "unexpected tool_use_id '" + id + "' in a tool_result "
                                                "block. Each tool_result block must have a "
                                                "corresponding tool_use block in the previous message.")};
      }
    }
    open_uses.clear();
  }
}

RequestJson translate_tools(const RequestJson& tools, const std::string& path) {
  if (!tools.is_array()) {
    throw ApiException{invalid_type(path, std::string("expected an array of tools, got ") +
                                              json_type_name(tools) + ".")};
  }
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    JsonFields f(tools[i], element_path(path, i));
    const auto type = f.string("type").value_or("custom");
    if (type != "custom") {
      throw ApiException{unsupported_value(f.param("type"), "server tool '" + type + "' is not "
                                                            "supported; only client tools "
                                                            "({name, description, input_schema}).")};
    }
    const auto name = f.string("name");
    if (!name || name->empty()) throw ApiException{missing_parameter(f.param("name"))};
    // A call names its tool: two tools of one name could not be told apart (Anthropic's 400 too).
    for (const RequestJson& earlier : out) {
      if (earlier["function"]["name"] == *name) {
        throw ApiException{invalid_value(f.param("name"), "tool names must be unique; '" + *name +
                                                              "' is used twice.")};
      }
    }
    const RequestJson* schema = f.get("input_schema");
    if (!schema) throw ApiException{missing_parameter(f.param("input_schema"))};
    if (!schema->is_object()) {
      throw ApiException{invalid_type(f.param("input_schema"), std::string("expected a JSON Schema "
                                                                           "object, got ") +
                                                                   json_type_name(*schema) + ".")};
    }
    const auto schema_type = schema->find("type");
    if (schema_type == schema->end() || *schema_type != "object") {
      throw ApiException{invalid_value(f.param("input_schema") + ".type",
                                       "a tool's input_schema must have type 'object'.")};
    }
    const auto props = schema->find("properties");
    if (props != schema->end() && !props->is_object()) {
      throw ApiException{invalid_type(f.param("input_schema") + ".properties",
                                      "expected an object mapping names to schemas.")};
    }
    RequestJson function = {{"name", *name}};
    if (const auto description = f.string("description")) function["description"] = *description;
    function["parameters"] = *schema;
    f.accept("cache_control");
    // A forced call follows the schema, strict or not; strict: true also makes an unknown
    // `format` a 400 (as chat's, docs/constrained-decoding.md).
    if (const auto strict = f.boolean("strict")) function["strict"] = *strict;
    (void)f.boolean("eager_input_streaming");  // inputs always stream as they are written
    f.reject_unknown();
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// Also sets chat's parallel_tool_calls from disable_parallel_tool_use.
RequestJson translate_tool_choice(const RequestJson& choice, const std::string& path, RequestJson& chat) {
  JsonFields f(choice, path);
  const auto type = f.string("type");
  if (!type) throw ApiException{missing_parameter(f.param("type"))};
  if (const auto disable = f.boolean("disable_parallel_tool_use")) chat["parallel_tool_calls"] = !*disable;
  RequestJson out;
  if (*type == "auto" || *type == "none") {
    out = *type;
  } else if (*type == "any") {
    // Checked here, so the 400 says 'any' (chat's check would say 'required').
    if (!chat.contains("tools") || chat["tools"].empty()) {
      throw ApiException{invalid_value(f.param("type"), "'any' needs at least one tool in 'tools'.")};
    }
    out = "required";
  } else if (*type == "tool") {
    const auto name = f.string("name");
    if (!name) throw ApiException{missing_parameter(f.param("name"))};
    out = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    throw ApiException{invalid_value(f.param("type"), "'" + *type + "' is not one of auto, any, "
                                                      "tool, none.")};
  }
  f.reject_unknown();
  return out;
}

// Structured outputs: output_config.format {type: json_schema, schema} -> chat's
// response_format (the output is constrained to the schema). `effort` changes nothing here.
RequestJson translate_output_config(const RequestJson& config) {
  JsonFields f(config, "output_config");
  if (const auto effort = f.string("effort")) {
    if (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "xhigh" && *effort != "max") {
      throw ApiException{invalid_value(f.param("effort"), "'" + *effort + "' is not one of low, medium, high, "
                                                          "xhigh, max.")};
    }
  }
  const RequestJson* format = f.object("format");
  f.reject_unknown();
  if (!format) return nullptr;
  JsonFields ff(*format, f.param("format"));
  const auto type = ff.string("type");
  if (!type) throw ApiException{missing_parameter(ff.param("type"))};
  if (*type != "json_schema") {
    throw ApiException{invalid_value(ff.param("type"), "'" + *type + "' is not json_schema.")};
  }
  const RequestJson* schema = ff.object("schema");
  if (!schema) throw ApiException{missing_parameter(ff.param("schema"))};
  ff.reject_unknown();
  return {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}, {"strict", true}}}};
}

// Checked here so that a 400 names stop_sequences, the field the client sent.
RequestJson stop_sequences(const RequestJson& stop, const SchemaLimits& limits) {
  if (static_cast<int64_t>(stop.size()) > limits.max_stop_strings) {
    throw ApiException{invalid_value("stop_sequences", "at most " + std::to_string(limits.max_stop_strings) +
                                                           " stop sequences are allowed, got " +
                                                           std::to_string(stop.size()) + ".")};
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (!stop[i].is_string()) {
      throw ApiException{invalid_type(element_path("stop_sequences", i),
                                      std::string("expected a string, got ") + json_type_name(stop[i]) + ".")};
    }
    if (stop[i].get_ref<const std::string&>().empty()) {
      throw ApiException{invalid_value(element_path("stop_sequences", i), "a stop sequence must not be empty.")};
    }
  }
  return stop;
}

// Anthropic's floor for a thinking budget.
constexpr int64_t kMinThinkingBudget = 1024;

struct Thinking {
  bool enabled = false;
  std::optional<int64_t> budget_tokens;  // type "enabled" only
};

// max_tokens: the request's, when it is an integer (count_tokens has none). As Anthropic's
// API: "enabled" requires budget_tokens >= 1024 and below max_tokens; "adaptive" leaves the
// length to the model (a budget_tokens there is not enforced); "disabled" ignores it.
Thinking parse_thinking(const RequestJson& thinking, const RequestJson* max_tokens) {
  JsonFields f(thinking, "thinking");
  const auto type = f.string("type");
  if (!type) throw ApiException{missing_parameter("thinking.type")};
  const auto budget = f.integer("budget_tokens", 0, std::numeric_limits<int32_t>::max());
  // The thinking text is always returned whole (nothing is summarized or signed).
  if (const auto display = f.string("display"); display && *display != "summarized" && *display != "omitted") {
    throw ApiException{invalid_value("thinking.display", "'" + *display + "' is not one of summarized, omitted.")};
  }
  f.reject_unknown();
  if (*type == "adaptive") return {true, std::nullopt};
  if (*type == "disabled") return {false, std::nullopt};
  if (*type != "enabled") {
    throw ApiException{invalid_value("thinking.type", "'" + *type + "' is not one of enabled, "
                                                      "adaptive, disabled.")};
  }
  if (!budget) throw ApiException{missing_parameter("thinking.budget_tokens")};
  if (*budget < kMinThinkingBudget) {
    throw ApiException{invalid_value("thinking.budget_tokens", "must be greater than or equal to " +
                                                                   std::to_string(kMinThinkingBudget) + ".")};
  }
  if (max_tokens && max_tokens->is_number_integer() && *budget >= max_tokens->get<int64_t>()) {
    throw ApiException{invalid_value("thinking.budget_tokens", "max_tokens must be greater than "
                                                               "thinking.budget_tokens.")};
  }
  return {true, budget};
}

}  // namespace

RequestJson anthropic_to_chat_json(const RequestJson& root, bool count_tokens, const SchemaLimits& limits) {
  JsonFields f(root, "");
  RequestJson chat = RequestJson::object();
  if (const auto model = f.string("model")) chat["model"] = *model;
  RequestJson messages = RequestJson::array();
  if (const RequestJson* system = f.get("system")) {
    messages.push_back({{"role", "system"}, {"content", text_of(*system, "system")}});
  }
  const RequestJson* input = f.array("messages");
  if (!input) throw ApiException{missing_parameter("messages")};
  if (input->empty()) throw ApiException{invalid_value("messages", "at least one message is required.")};
  std::vector<MessageTools> message_tools;
  for (size_t i = 0; i < input->size(); ++i) {
    message_tools.push_back(
        translate_message((*input)[i], element_path("messages", i), i + 1 == input->size(), messages));
  }
  check_tool_pairing(message_tools);
  // A final assistant message is a prefill: Anthropic's answer continues its text rather than
  // starting a new turn (so "{" forces JSON, a name forces a voice).
  const RequestJson& last = messages.back();
  if (last["role"] == "assistant" && !last.contains("tool_calls") && !last["content"].get<std::string>().empty()) {
    // The template trims a turn's end, so the prefill could not be found; Anthropic refuses it too.
    const std::string& prefill = last["content"].get_ref<const std::string&>();
    if (std::isspace(static_cast<unsigned char>(prefill.back()))) {
      throw ApiException{invalid_value(element_path("messages", input->size() - 1) + ".content",
                                       "final assistant content cannot end with trailing whitespace.")};
    }
    chat["continue_final_message"] = true;
    chat["add_generation_prompt"] = false;
  }
  chat["messages"] = std::move(messages);
  if (const RequestJson* tools = f.get("tools")) chat["tools"] = translate_tools(*tools, "tools");
  if (const RequestJson* choice = f.object("tool_choice")) {
    chat["tool_choice"] = translate_tool_choice(*choice, "tool_choice", chat);
    if (chat["tool_choice"].is_object()) {
      require_named_tool(chat.value("tools", RequestJson()), chat["tool_choice"]["function"]["name"], "tool_choice.name");
    }
  }
  if (const RequestJson* config = f.object("output_config")) {
    chat["response_format"] = translate_output_config(*config);
  }
  f.accept("cache_control");  // automatic prompt caching: the prefix cache needs no marks
  Thinking thinking;
  if (const RequestJson* t = f.object("thinking")) thinking = parse_thinking(*t, count_tokens ? nullptr : f.get("max_tokens"));
  chat["chat_template_kwargs"] = {{"enable_thinking", thinking.enabled}};
  if (thinking.budget_tokens && !count_tokens) chat["thinking_token_budget"] = *thinking.budget_tokens;
  if (!count_tokens) {
    const RequestJson* max_tokens = f.get("max_tokens");
    if (!max_tokens) throw ApiException{missing_parameter("max_tokens")};
    chat["max_tokens"] = *max_tokens;
    (void)f.number("temperature", 0.0, 1.0);  // Anthropic's range (chat's goes to 2)
    for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
      if (const RequestJson* v = f.get(key)) chat[key] = *v;
    }
    if (const RequestJson* stop = f.array("stop_sequences")) chat["stop"] = stop_sequences(*stop, limits);
    (void)f.object("metadata");  // {user_id}: typed as Anthropic's, otherwise unused
    (void)f.string("service_tier");
  }
  for (const char* key : {"container", "mcp_servers", "context_management"}) {
    if (f.get(key)) {
      throw ApiException{unsupported_value(key, "not supported by this server.")};
    }
  }
  if (limits.reject_unknown_fields) f.reject_unknown();
  return chat;
}

ChatRequest parse_anthropic_request(std::string_view body, const SchemaLimits& limits) {
  const RequestJson chat = anthropic_to_chat_json(parse_request_json(body), /*count_tokens=*/false, limits);
  ChatRequest r = parse_chat_request(chat.dump(), limits);
  r.response_format_schema_param = "output_config.format.schema";
  return r;
}

ChatRequest parse_anthropic_count_tokens(std::string_view body, const SchemaLimits& limits) {
  const RequestJson chat = anthropic_to_chat_json(parse_request_json(body), /*count_tokens=*/true, limits);
  return parse_chat_request(chat.dump(), limits);
}

}  // namespace deltaserve::server
