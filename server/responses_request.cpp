#include "server/responses_request.h"

#include <algorithm>
#include <limits>
#include <set>

#include "server/chat_messages.h"
#include "server/json_fields.h"

namespace deltaserve::server {
namespace {

// Text of a message's or a tool output's content: a string or text parts.
std::string parts_text(const RequestJson& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw ApiException{invalid_type(path, std::string("expected a string or an array of content "
                                                      "parts, got ") + json_type_name(content) + ".")};
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    JsonFields part(content[i], element_path(path, i));
    const auto type = part.string("type");
    if (!type) throw ApiException{missing_parameter(part.param("type"))};
    if (*type != "input_text" && *type != "output_text" && *type != "text" && *type != "refusal") {
      throw ApiException{unsupported_value(part.param("type"), "content part type '" + *type +
                                                                   "' is not supported; only text "
                                                                   "(the served model is text-only).")};
    }
    const auto t = part.string(*type == "refusal" ? "refusal" : "text");
    if (!t) throw ApiException{missing_parameter(part.param(*type == "refusal" ? "refusal" : "text"))};
    part.accept("annotations");
    part.accept("logprobs");
    part.reject_unknown();
    text += *t;
  }
  return text;
}

// The assistant message a function_call or reasoning item belongs to: the last message when
// it is an assistant's, else a new one.
RequestJson& assistant_message(RequestJson& messages) {
  if (messages.empty() || messages.back()["role"] != "assistant") {
    messages.push_back({{"role", "assistant"}, {"content", ""}});
  }
  return messages.back();
}

// `call_ids`: the call_id of every function_call so far (the stored conversation's too).
void add_item(const RequestJson& item, const std::string& path, RequestJson& messages,
              std::string& pending_reasoning, std::set<std::string>& call_ids) {
  JsonFields f(item, path);
  const auto type = f.string("type").value_or("message");
  f.accept("id");
  f.accept("status");
  if (type == "message") {
    const auto role = f.string("role");
    if (!role) throw ApiException{missing_parameter(f.param("role"))};
    if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer") {
      throw ApiException{invalid_value(f.param("role"), "'" + *role + "' is not one of user, "
                                                        "assistant, system, developer.")};
    }
    const RequestJson* content = f.get("content");
    if (!content) throw ApiException{missing_parameter(f.param("content"))};
    const std::string text = parts_text(*content, f.param("content"));
    f.reject_unknown();
    if (*role == "assistant") {
      RequestJson& m = assistant_message(messages);
      if (m.contains("tool_calls")) {  // text after calls starts a new turn of the assistant
        messages.push_back({{"role", "assistant"}, {"content", text}});
      } else {
        m["content"] = m["content"].get<std::string>() + text;
      }
      if (!pending_reasoning.empty()) messages.back()["reasoning_content"] = pending_reasoning;
      pending_reasoning.clear();
    } else {
      messages.push_back({{"role", *role == "developer" ? "system" : *role}, {"content", text}});
    }
  } else if (type == "function_call") {
    const auto call_id = f.string("call_id");
    const auto name = f.string("name");
    const auto arguments = f.string("arguments");
    if (!call_id) throw ApiException{missing_parameter(f.param("call_id"))};
    if (!name) throw ApiException{missing_parameter(f.param("name"))};
    if (!arguments) throw ApiException{missing_parameter(f.param("arguments"))};
    f.reject_unknown();
    RequestJson& m = assistant_message(messages);
    if (!pending_reasoning.empty()) m["reasoning_content"] = pending_reasoning;
    pending_reasoning.clear();
    if (!m.contains("tool_calls")) m["tool_calls"] = RequestJson::array();
    call_ids.insert(*call_id);
    m["tool_calls"].push_back({{"id", *call_id},
                               {"type", "function"},
                               {"function", {{"name", *name}, {"arguments", *arguments}}}});
  } else if (type == "function_call_output") {
    const auto call_id = f.string("call_id");
    if (!call_id) throw ApiException{missing_parameter(f.param("call_id"))};
    const RequestJson* output = f.get("output");
    if (!output) throw ApiException{missing_parameter(f.param("output"))};
    const std::string text = parts_text(*output, f.param("output"));
    f.reject_unknown();
    // As OpenAI's: an output must answer a call, or the template renders a result of nothing.
    if (!call_ids.contains(*call_id)) {
      throw ApiException{invalid_value(f.param("call_id"), "No tool call found for function call output "
                                                           "with call_id '" + *call_id + "': a "
                                                           "function_call item with that call_id must "
                                                           "come first (in input or in the "
                                                           "previous_response_id conversation).")};
    }
    messages.push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
  } else if (type == "reasoning") {
    std::string text;
    if (const RequestJson* content = f.array("content")) {
      for (const RequestJson& part : *content) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          text += part["text"].get<std::string>();
        }
      }
    }
    if (const RequestJson* summary = f.array("summary"); summary && text.empty()) {
      for (const RequestJson& part : *summary) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          text += part["text"].get<std::string>();
        }
      }
    }
    f.accept("encrypted_content");
    f.reject_unknown();
    pending_reasoning += text;
  } else {
    throw ApiException{unsupported_value(f.param("type"), "input item type '" + type + "' is not "
                                                          "supported; expected message, "
                                                          "function_call, function_call_output or "
                                                          "reasoning.")};
  }
}

RequestJson translate_tools(const RequestJson& tools) {
  if (!tools.is_array()) {
    throw ApiException{invalid_type("tools", std::string("expected an array of tools, got ") +
                                                 json_type_name(tools) + ".")};
  }
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    JsonFields f(tools[i], element_path("tools", i));
    const auto type = f.string("type");
    if (!type) throw ApiException{missing_parameter(f.param("type"))};
    if (*type != "function") {
      throw ApiException{unsupported_value(f.param("type"), "tool type '" + *type + "' is not "
                                                            "supported: this server runs no hosted "
                                                            "tools; only 'function'.")};
    }
    const auto name = f.string("name");
    if (!name || name->empty()) throw ApiException{missing_parameter(f.param("name"))};
    RequestJson function = {{"name", *name}};
    if (const auto description = f.string("description")) function["description"] = *description;
    if (const RequestJson* parameters = f.object("parameters")) function["parameters"] = *parameters;
    if (const auto strict = f.boolean("strict")) function["strict"] = *strict;
    f.reject_unknown();
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

RequestJson translate_tool_choice(const RequestJson& choice) {
  if (choice.is_string()) return choice;  // none | auto | required: chat checks them
  JsonFields f(choice, "tool_choice");
  const auto type = f.string("type");
  if (type != "function") {
    throw ApiException{unsupported_value("tool_choice.type", "only 'none', 'auto', 'required' or "
                                                             "{type: function, name} are supported.")};
  }
  const auto name = f.string("name");
  if (!name) throw ApiException{missing_parameter("tool_choice.name")};
  f.reject_unknown();
  return {{"type", "function"}, {"function", {{"name", *name}}}};
}

// text.format -> chat's response_format (null for plain text).
RequestJson translate_format(const RequestJson& text, nlohmann::json& echo) {
  JsonFields f(text, "text");
  f.accept("verbosity");
  const RequestJson* format = f.object("format");
  f.reject_unknown();
  if (!format) return nullptr;
  echo["text"]["format"] = nlohmann::json::parse(format->dump());
  JsonFields ff(*format, "text.format");
  const auto type = ff.string("type");
  if (!type) throw ApiException{missing_parameter("text.format.type")};
  if (*type == "text") {
    ff.reject_unknown();
    return nullptr;
  }
  if (*type == "json_object") {
    ff.reject_unknown();
    return {{"type", "json_object"}};
  }
  if (*type != "json_schema") {
    throw ApiException{invalid_value("text.format.type", "'" + *type + "' is not one of text, "
                                                         "json_object, json_schema.")};
  }
  const auto name = ff.string("name");
  if (!name) throw ApiException{missing_parameter("text.format.name")};
  const RequestJson* schema = ff.object("schema");
  if (!schema) throw ApiException{missing_parameter("text.format.schema")};
  RequestJson json_schema = {{"name", *name}, {"schema", *schema}};
  if (const auto description = ff.string("description")) json_schema["description"] = *description;
  if (const auto strict = ff.boolean("strict")) json_schema["strict"] = *strict;
  ff.reject_unknown();
  return {{"type", "json_schema"}, {"json_schema", std::move(json_schema)}};
}

void reject_unsupported(JsonFields& f) {
  if (f.boolean("background").value_or(false)) {
    throw ApiException{unsupported_value("background", "background responses are not supported; "
                                                       "use stream or wait for the answer.")};
  }
  for (const char* key : {"conversation", "prompt", "max_tool_calls"}) {
    if (f.get(key)) throw ApiException{unsupported_value(key, "not supported by this server.")};
  }
  if (const auto top = f.integer("top_logprobs", 0, 20); top && *top > 0) {
    throw ApiException{unsupported_value("top_logprobs", "logprobs are not offered on "
                                                         "/v1/responses; use /v1/chat/completions.")};
  }
  if (const auto truncation = f.string("truncation"); truncation && *truncation != "disabled") {
    throw ApiException{unsupported_value("truncation", "only 'disabled' is supported (a prompt "
                                                       "that does not fit is a 400).")};
  }
}

}  // namespace

void responses_input_to_messages(const RequestJson& input, RequestJson& messages,
                                 std::string* late_system) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) {
    throw ApiException{invalid_type("input", std::string("expected a string or an array of items, "
                                                         "got ") + json_type_name(input) + ".")};
  }
  const auto is_system = [](const RequestJson& m) { return m.value("role", std::string()) == "system"; };
  bool after_other = !std::all_of(messages.begin(), messages.end(), is_system);  // the history
  std::string pending_reasoning;
  std::set<std::string> call_ids;
  for (const RequestJson& m : messages) {
    if (!m.contains("tool_calls")) continue;
    for (const RequestJson& call : m["tool_calls"]) call_ids.insert(call.value("id", std::string()));
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const size_t before = messages.size();
    add_item(input[i], element_path("input", i), messages, pending_reasoning, call_ids);
    const bool system_added = messages.size() > before && is_system(messages.back());
    if (late_system && late_system->empty() && after_other && system_added) {
      *late_system = element_path("input", i);
    }
    for (size_t k = before; k < messages.size(); ++k) after_other = after_other || !is_system(messages[k]);
  }
}

ResponsesRequest parse_responses_request(std::string_view body, const SchemaLimits& limits,
                                         ResponseStore& store) {
  const RequestJson root = parse_request_json(body);
  JsonFields f(root, "");
  ResponsesRequest r;
  nlohmann::json& echo = r.echo;
  RequestJson chat = RequestJson::object();
  if (const auto model = f.string("model")) chat["model"] = *model;

  if (const auto previous = f.string("previous_response_id")) {
    std::optional<ResponseStore::Stored> stored = store.find(*previous);
    if (!stored) {
      // OpenAI's code: agent clients (Codex among them) match on it to resend the whole
      // conversation instead.
      ApiError error = invalid_value("previous_response_id",
                                     "Previous response with id '" + *previous + "' not found: "
                                     "no stored response has it (never stored, store: false, "
                                     "expired or evicted; this server keeps responses in memory only).");
      error.code = "previous_response_not_found";
      throw ApiException{std::move(error)};
    }
    r.previous_response_id = *previous;
    r.history = std::move(stored->messages);
    // As OpenAI lists a continuation's input items: the chain's first (the previous response's
    // input items, which hold its own chain, then its output).
    r.previous_items = std::move(stored->input_items);
    if (!r.previous_items.is_array()) r.previous_items = nlohmann::json::array();
    const nlohmann::json response = nlohmann::json::parse(stored->response_json, nullptr, false);
    if (response.is_object()) {
      for (const nlohmann::json& item : response.value("output", nlohmann::json::array())) r.previous_items.push_back(item);
    }
  }
  const RequestJson* input = f.get("input");
  if (!input) throw ApiException{missing_parameter("input")};
  std::string late_system;
  responses_input_to_messages(*input, r.history, &late_system);
  r.input = *input;
  if (r.history.empty()) throw ApiException{invalid_value("input", "at least one item is required.")};

  RequestJson messages = RequestJson::array();
  const auto instructions = f.string("instructions");
  echo["instructions"] = instructions ? nlohmann::json(*instructions) : nlohmann::json();
  if (instructions) messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const RequestJson& m : r.history) {
    // instructions and the input's leading system / developer messages (agents send both)
    // become one system message: chat templates, Qwen's among them, take one, first.
    const bool leading_system = m["role"] == "system" && messages.size() == 1 && messages[0]["role"] == "system";
    if (leading_system) {
      std::string& text = messages[0]["content"].get_ref<std::string&>();
      text += (text.empty() ? "" : "\n\n") + m["content"].get<std::string>();
    } else {
      messages.push_back(m);
    }
  }
  chat["messages"] = std::move(messages);

  if (const RequestJson* tools = f.get("tools")) {
    chat["tools"] = translate_tools(*tools);
    echo["tools"] = nlohmann::json::parse(tools->dump());
  } else {
    echo["tools"] = nlohmann::json::array();
  }
  if (const RequestJson* choice = f.get("tool_choice")) {
    chat["tool_choice"] = translate_tool_choice(*choice);
    if (chat["tool_choice"].is_object()) {
      require_named_tool(chat.value("tools", RequestJson()), chat["tool_choice"]["function"]["name"], "tool_choice.name");
    }
    echo["tool_choice"] = nlohmann::json::parse(choice->dump());
  } else {
    echo["tool_choice"] = "auto";
  }
  // Checked here, so a 400 names the field the client sent.
  if (const auto v = f.integer("max_output_tokens", 1, std::numeric_limits<int32_t>::max())) chat["max_tokens"] = *v;
  for (const char* key : {"temperature", "top_p", "stream", "thinking_token_budget"}) {
    if (const RequestJson* v = f.get(key)) chat[key] = *v;
  }
  echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (const RequestJson* reasoning = f.object("reasoning")) {
    JsonFields rf(*reasoning, "reasoning");
    const auto effort = rf.string("effort");
    rf.accept("summary");
    rf.accept("generate_summary");
    rf.reject_unknown();
    if (effort) {
      if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" &&
          *effort != "high") {
        throw ApiException{invalid_value("reasoning.effort", "expected one of none, minimal, low, "
                                                             "medium, high.")};
      }
      chat["chat_template_kwargs"] = {{"enable_thinking", *effort != "none"}};
      echo["reasoning"]["effort"] = *effort;
    }
  }
  echo["text"] = {{"format", {{"type", "text"}}}};
  RequestJson response_format;
  if (const RequestJson* text = f.object("text")) response_format = translate_format(*text, echo);
  r.store = f.boolean("store").value_or(true);
  echo["metadata"] = nlohmann::json::object();
  if (const RequestJson* metadata = f.object("metadata")) {
    echo["metadata"] = nlohmann::json::parse(metadata->dump());
  }
  const bool parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  echo["parallel_tool_calls"] = parallel_tool_calls;
  chat["parallel_tool_calls"] = parallel_tool_calls;
  for (const char* key : {"user", "safety_identifier", "prompt_cache_key", "service_tier",
                          "include", "stream_options", "prompt_cache_retention"}) {
    f.accept(key);
  }
  reject_unsupported(f);
  if (limits.reject_unknown_fields) f.reject_unknown();

  r.chat = parse_chat_request(chat.dump(), limits);
  r.chat.late_system_param = std::move(late_system);  // the client's item, not the chat index
  r.chat.response_format = std::move(response_format);
  r.chat.response_format_schema_param = "text.format.schema";
  r.chat.params.max_tokens_param = "max_output_tokens";
  const GenerationParams& p = r.chat.params;
  // As the client sent them: the sampler's float would echo 0.7 as 0.699999988079071.
  for (const char* key : {"temperature", "top_p"}) {
    const RequestJson* v = f.get(key);
    echo[key] = v ? nlohmann::json::parse(v->dump()) : nlohmann::json(1.0);
  }
  echo["max_output_tokens"] = p.max_tokens ? nlohmann::json(*p.max_tokens) : nlohmann::json();
  echo["previous_response_id"] =
      r.previous_response_id.empty() ? nlohmann::json() : nlohmann::json(r.previous_response_id);
  echo["store"] = r.store;
  echo["truncation"] = "disabled";
  return r;
}

}  // namespace deltaserve::server
