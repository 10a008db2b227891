#include "server/openai_schema.h"

#include <limits>

#include "server/chat_messages.h"
#include "server/json_fields.h"

namespace deltaserve::server {
namespace {

constexpr int64_t kMaxTokensCeiling = std::numeric_limits<int32_t>::max();
// OpenAI's and vLLM's max_tokens when a completions request gives none.
constexpr int32_t kCompletionsDefaultMaxTokens = 16;
constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

// Syntax errors, bad UTF-8 and number overflow are 400 invalid_json; bodies past the JSON
// limits stop parsing at the limit (400 json_too_deep / json_too_large).
RequestJson parse_body(std::string_view body, const SchemaLimits& limits) {
  return parse_request_json(body, limits.json);
}

int32_t token_id(const RequestJson& value, const std::string& param,
                 const SchemaLimits& limits) {
  const int64_t max_id = limits.num_vocab > 0 ? limits.num_vocab - 1 : kMaxTokenId;
  return static_cast<int32_t>(require_integer(value, param, 0, max_id));
}

std::vector<std::string> parse_stop(JsonFields& f, const SchemaLimits& limits) {
  const RequestJson* v = f.get("stop");
  std::vector<std::string> stop;
  if (!v) return stop;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) stop.push_back(v->get<std::string>());
    return stop;
  }
  if (!v->is_array()) {
    throw ApiException{invalid_type("stop", std::string("expected a string or an array of "
                                                        "strings, got ") + json_type_name(*v) + ".")};
  }
  if (static_cast<int64_t>(v->size()) > limits.max_stop_strings) {
    throw ApiException{invalid_value("stop", "at most " + std::to_string(limits.max_stop_strings) +
                                                 " stop strings are allowed, got " +
                                                 std::to_string(v->size()) + ".")};
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const RequestJson& s = (*v)[i];
    if (!s.is_string()) {
      throw ApiException{invalid_type(element_path("stop", i),
                                      std::string("expected a string, got ") + json_type_name(s) + ".")};
    }
    if (s.get<std::string>().empty()) {
      throw ApiException{invalid_value(element_path("stop", i), "a stop string must not be empty.")};
    }
    stop.push_back(s.get<std::string>());
  }
  return stop;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(JsonFields& f, const SchemaLimits& limits) {
  std::vector<std::pair<int32_t, float>> bias;
  const RequestJson* v = f.object("logit_bias");
  if (!v) return bias;
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string param = "logit_bias." + it.key();
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(it.key(), &used);
      if (used != it.key().size()) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    const int64_t max_id = limits.num_vocab > 0 ? limits.num_vocab - 1 : kMaxTokenId;
    if (id < 0 || id > max_id) {
      throw ApiException{invalid_value(param, "keys must be token ids between 0 and " +
                                                  std::to_string(max_id) + ".")};
    }
    if (!it->is_number()) {
      throw ApiException{invalid_type(param, std::string("expected a number, got ") +
                                                 json_type_name(*it) + ".")};
    }
    const double b = it->get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
      throw ApiException{invalid_value(param, "a bias must lie between -100 and 100.")};
    }
    bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return bias;
}

void parse_stream_options(JsonFields& f, GenerationParams& p) {
  const RequestJson* v = f.object("stream_options");
  if (!v) return;
  if (!p.stream) {
    throw ApiException{invalid_value("stream_options",
                                     "stream_options is only allowed when stream is true.")};
  }
  JsonFields o(*v, "stream_options");
  p.include_usage = o.boolean("include_usage").value_or(false);
  p.continuous_usage_stats = o.boolean("continuous_usage_stats").value_or(false);
  o.reject_unknown();
}

// Fields the API defines that this server accepts and ignores (they change no output); their
// types are still checked as OpenAI checks them, so a client's mistake is a 400, not silence.
void accept_ignored(JsonFields& f) {
  for (const char* key : {"user", "service_tier", "prompt_cache_key", "safety_identifier", "request_id"}) {
    (void)f.string(key);
  }
  for (const char* key : {"store", "parallel_tool_calls"}) (void)f.boolean(key);
  (void)f.integer("priority", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (const RequestJson* metadata = f.object("metadata")) {  // string -> string, as OpenAI's
    for (auto it = metadata->begin(); it != metadata->end(); ++it) {
      if (!it->is_string()) {
        throw ApiException{invalid_type("metadata." + it.key(), std::string("expected a string, got ") +
                                                                    json_type_name(*it) + ".")};
      }
    }
  }
}

// Fields whose only supported value is the default: anything else is a clear 400. Chat
// requests take response_format themselves (constrained decoding).
void reject_unsupported(JsonFields& f, bool chat) {
  if (const RequestJson* rf = chat ? nullptr : f.object("response_format")) {
    const auto type = rf->find("type");
    if (type == rf->end() || !type->is_string() || *type != "text") {
      throw ApiException{unsupported_value(
          "response_format", "only {\"type\": \"text\"} is supported (no guided decoding).")};
    }
  }
  if (const auto best_of = f.integer("best_of", 1, 128); best_of && *best_of != 1) {
    throw ApiException{unsupported_value("best_of", "only best_of = 1 is supported.")};
  }
  if (f.boolean("echo").value_or(false)) {
    throw ApiException{unsupported_value("echo", "echo = true is not supported.")};
  }
  if (const auto suffix = f.string("suffix"); suffix && !suffix->empty()) {
    throw ApiException{unsupported_value("suffix", "suffix is not supported.")};
  }
  if (const auto effort = f.string("reasoning_effort")) {
    if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" &&
        *effort != "high") {
      throw ApiException{invalid_value("reasoning_effort",
                                       "expected one of none, minimal, low, medium, high.")};
    }
  }
}

// Fields common to chat and completions. `chat` selects the logprobs flavour: chat has a
// boolean `logprobs` + `top_logprobs`; completions an integer `logprobs`.
GenerationParams parse_common(JsonFields& f, const SchemaLimits& limits, bool chat) {
  GenerationParams p;
  p.model = f.string("model").value_or("");
  runtime::SamplingParams& s = p.sampling;
  s.temperature = static_cast<float>(f.number("temperature", 0.0, 2.0).value_or(1.0));
  s.top_p = static_cast<float>(f.number("top_p", 0.0, 1.0).value_or(1.0));
  if (f.get("top_p") && s.top_p <= 0.0f) {
    throw ApiException{invalid_value("top_p", "must be greater than 0.")};
  }
  const int64_t top_k = f.integer("top_k", -1, kMaxTokenId).value_or(0);
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // vLLM's -1 = off
  s.min_p = static_cast<float>(f.number("min_p", 0.0, 1.0).value_or(0.0));
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2.0, 2.0).value_or(0.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  s.repetition_penalty = static_cast<float>(f.number("repetition_penalty", 0.0, 2.0).value_or(1.0));
  if (s.repetition_penalty <= 0.0f) {
    throw ApiException{invalid_value("repetition_penalty", "must be greater than 0.")};
  }
  if (auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  s.logit_bias = parse_logit_bias(f, limits);

  if (chat) {
    s.logprobs = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, limits.max_logprobs);
    if (top && !s.logprobs) {
      throw ApiException{invalid_value("top_logprobs", "top_logprobs requires logprobs = true.")};
    }
    s.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else if (const auto lp = f.integer("logprobs", 0, limits.max_logprobs)) {
    s.logprobs = true;
    s.top_logprobs = static_cast<int32_t>(*lp);
  }

  const auto max_completion = f.integer("max_completion_tokens", 1, kMaxTokensCeiling);
  const auto max_tokens = f.integer("max_tokens", 1, kMaxTokensCeiling);
  if (max_completion) {
    p.max_tokens = static_cast<int32_t>(*max_completion);
    p.max_tokens_param = "max_completion_tokens";
  } else if (max_tokens) {
    p.max_tokens = static_cast<int32_t>(*max_tokens);
  }

  if (const auto n = f.integer("n", 1, 128); n && *n != 1) {
    throw ApiException{unsupported_value("n", "only n = 1 is supported; send " +
                                                  std::to_string(*n) + " requests instead.")};
  }
  p.stop = parse_stop(f, limits);
  if (const RequestJson* ids = f.array("stop_token_ids")) {
    for (size_t i = 0; i < ids->size(); ++i) {
      p.stop_token_ids.push_back(token_id((*ids)[i], element_path("stop_token_ids", i), limits));
    }
  }
  p.ignore_eos = f.boolean("ignore_eos").value_or(false);
  p.draft_depth = static_cast<int32_t>(f.integer("draft_depth", 0, 16).value_or(-1));
  p.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
  p.return_token_ids = f.boolean("return_token_ids").value_or(false);
  p.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  p.stream = f.boolean("stream").value_or(false);
  parse_stream_options(f, p);
  if (const auto field = f.string("reasoning_field")) {
    p.reasoning_field = parse_reasoning_field(*field);
    if (!p.reasoning_field) {
      throw ApiException{invalid_value("reasoning_field",
                                       "expected one of reasoning_content, reasoning, both.")};
    }
  }
  accept_ignored(f);
  reject_unsupported(f, chat);
  return p;
}

}  // namespace

std::optional<ReasoningField> parse_reasoning_field(std::string_view name) {
  if (name == "reasoning_content") return ReasoningField::ReasoningContent;
  if (name == "reasoning") return ReasoningField::Reasoning;
  if (name == "both") return ReasoningField::Both;
  return std::nullopt;
}

const char* reasoning_field_name(ReasoningField field) {
  switch (field) {
    case ReasoningField::ReasoningContent: return "reasoning_content";
    case ReasoningField::Reasoning: return "reasoning";
    case ReasoningField::Both: return "both";
  }
  return "reasoning_content";
}

ChatRequest parse_chat_request(std::string_view body, const SchemaLimits& limits) {
  const RequestJson root = parse_body(body, limits);
  JsonFields f(root, "");
  ChatRequest r;
  const RequestJson* messages = f.get("messages");
  if (!messages) throw ApiException{missing_parameter("messages")};
  r.messages = normalize_messages(*messages, "messages", &r.late_system_param);
  r.params = parse_common(f, limits, /*chat=*/true);
  r.tools = normalize_tools(f.get("tools"), "tools");
  r.tool_choice = normalize_tool_choice(f.get("tool_choice"), r.tools, "tool_choice");
  r.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  r.response_format = normalize_response_format(f.get("response_format"), "response_format");
  if (const RequestJson* kwargs = f.object("chat_template_kwargs")) r.chat_template_kwargs = *kwargs;
  // reasoning_effort (checked in parse_common): "none" turns the template's thinking off, any
  // other effort on, as /v1/responses' reasoning.effort; explicit chat_template_kwargs win.
  if (const auto effort = f.string("reasoning_effort"); effort && !r.chat_template_kwargs.contains("enable_thinking")) {
    r.chat_template_kwargs["enable_thinking"] = *effort != "none";
  }
  // vLLM's extension: at most this many tokens of reasoning, then the close is forced.
  if (const auto budget = f.integer("thinking_token_budget", 0, kMaxTokensCeiling)) {
    r.params.sampling.thinking_budget = static_cast<int32_t>(*budget);
  }
  r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  r.continue_final_message = f.boolean("continue_final_message").value_or(false);
  if (r.continue_final_message && r.add_generation_prompt && f.get("add_generation_prompt")) {
    throw ApiException{invalid_value("continue_final_message",
                                     "cannot be combined with add_generation_prompt = true.")};
  }
  if (r.continue_final_message) r.add_generation_prompt = false;
  if (limits.reject_unknown_fields) f.reject_unknown();
  return r;
}

CompletionRequest parse_completion_request(std::string_view body, const SchemaLimits& limits) {
  const RequestJson root = parse_body(body, limits);
  JsonFields f(root, "");
  CompletionRequest r;
  const RequestJson* prompt = f.get("prompt");
  if (!prompt) throw ApiException{missing_parameter("prompt")};
  if (prompt->is_string()) {
    r.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt_text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_array()) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < (*prompt)[0].size(); ++i) {
      ids.push_back(token_id((*prompt)[0][i], "prompt[0][" + std::to_string(i) + "]", limits));
    }
    r.prompt_tokens = std::move(ids);
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < prompt->size(); ++i) {
      ids.push_back(token_id((*prompt)[i], element_path("prompt", i), limits));
    }
    r.prompt_tokens = std::move(ids);
  } else if (prompt->is_array() && prompt->size() > 1) {
    throw ApiException{unsupported_value("prompt", "one prompt per request is supported; got " +
                                                       std::to_string(prompt->size()) + ".")};
  } else {
    throw ApiException{invalid_type("prompt", "expected a string or an array of token ids.")};
  }
  if (r.prompt_text && r.prompt_text->empty()) {
    throw ApiException{invalid_value("prompt", "the prompt must not be empty.")};
  }
  r.params = parse_common(f, limits, /*chat=*/false);
  r.params.api_default_max_tokens = kCompletionsDefaultMaxTokens;
  if (limits.reject_unknown_fields) f.reject_unknown();
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body, const SchemaLimits& limits) {
  const RequestJson root = parse_body(body, limits);
  JsonFields f(root, "");
  TokenizeRequest r;
  r.prompt = f.string("prompt");
  const RequestJson* messages = f.get("messages");
  if (r.prompt.has_value() == (messages != nullptr)) {
    throw ApiException{invalid_value("prompt", "send exactly one of 'prompt' or 'messages'.")};
  }
  if (messages) {
    ChatRequest chat;
    chat.messages = normalize_messages(*messages, "messages", &chat.late_system_param);
    chat.tools = normalize_tools(f.get("tools"), "tools");
    if (const RequestJson* kwargs = f.object("chat_template_kwargs")) chat.chat_template_kwargs = *kwargs;
    chat.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
    r.chat = std::move(chat);
  }
  r.add_special_tokens = f.boolean("add_special_tokens").value_or(true);
  f.accept("model");
  if (limits.reject_unknown_fields) f.reject_unknown();
  return r;
}

DetokenizeRequest parse_detokenize_request(std::string_view body, const SchemaLimits& limits) {
  const RequestJson root = parse_body(body, limits);
  JsonFields f(root, "");
  DetokenizeRequest r;
  const RequestJson* tokens = f.array("tokens");
  if (!tokens) throw ApiException{missing_parameter("tokens")};
  for (size_t i = 0; i < tokens->size(); ++i) {
    r.tokens.push_back(token_id((*tokens)[i], element_path("tokens", i), limits));
  }
  f.accept("model");
  if (limits.reject_unknown_fields) f.reject_unknown();
  return r;
}

}  // namespace deltaserve::server
