#include "server/openai_response.h"

#include <cmath>

#include "server/utf8.h"

namespace deltaserve::server {
namespace {

nlohmann::json token_bytes(const std::string& text) {
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// OpenAI's tool_calls array. Stream deltas carry each call's index; a call's first piece
// carries its id, type and name, the later ones only their arguments fragment.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  nlohmann::json list = nlohmann::json::array();
  for (const ToolCall& call : calls) {
    nlohmann::json item = nlohmann::json::object();
    if (with_index) item["index"] = call.index;
    if (call.starts || !with_index) {
      item["id"] = call.id;
      item["type"] = "function";
      item["function"] = {{"name", call.name}, {"arguments", call.arguments}};
    } else {
      item["function"] = {{"arguments", call.arguments}};
    }
    list.push_back(std::move(item));
  }
  return list;
}

}  // namespace

std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& value) {
  std::string out = "data: ";
  out += json_text(value);
  out += "\n\n";
  return out;
}

nlohmann::json ResponseFormatter::usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.num_prompt_tokens},
          {"completion_tokens", usage.num_completion_tokens},
          {"total_tokens", usage.num_prompt_tokens + usage.num_completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.num_cached_prompt_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", usage.num_reasoning_tokens}}}};
}

nlohmann::json ResponseFormatter::chunk_base() const {
  const bool chat = s_.endpoint == Endpoint::Chat;
  nlohmann::json chunk = {{"id", s_.id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", s_.created},
                          {"model", s_.model}};
  if (s_.usage_null_in_chunks) chunk["usage"] = nullptr;
  return chunk;
}

void ResponseFormatter::put_reasoning(nlohmann::json& target, const std::string& reasoning) const {
  if (s_.reasoning_field != ReasoningField::Reasoning) target["reasoning_content"] = reasoning;
  if (s_.reasoning_field != ReasoningField::ReasoningContent) target["reasoning"] = reasoning;
}

nlohmann::json ResponseFormatter::chat_logprobs(
    const std::vector<scheduler::TokenLogprob>& lps) const {
  nlohmann::json content = nlohmann::json::array();
  for (const scheduler::TokenLogprob& lp : lps) {
    const std::string text = codec_.token_text(lp.token);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [token, logprob] : lp.top) {
      // A token the output constraint refuses has p = 0: -inf is no JSON number (it would be
      // written as null, which typed clients cannot read), and it is no likely token.
      if (!std::isfinite(logprob)) continue;
      const std::string alt = codec_.token_text(token);
      top.push_back({{"token", sanitize_utf8(alt)}, {"logprob", logprob}, {"bytes", token_bytes(alt)}});
    }
    content.push_back({{"token", sanitize_utf8(text)},
                       {"logprob", lp.logprob},
                       {"bytes", token_bytes(text)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// text_offset counts characters (code points) of the completion's text, as OpenAI and vLLM
// do, not bytes. A token that ends inside a character does not count it; the token that
// finishes it starts at that character (its offset points at the character both share).
nlohmann::json ResponseFormatter::completion_logprobs(
    const std::vector<scheduler::TokenLogprob>& lps, Utf8CharCounter& text_chars) const {
  nlohmann::json tokens = nlohmann::json::array();
  nlohmann::json token_logprobs = nlohmann::json::array();
  nlohmann::json top_logprobs = nlohmann::json::array();
  nlohmann::json text_offset = nlohmann::json::array();
  for (const scheduler::TokenLogprob& lp : lps) {
    const std::string bytes = codec_.token_text(lp.token);
    tokens.push_back(sanitize_utf8(bytes));
    token_logprobs.push_back(lp.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [token, logprob] : lp.top) {
      if (std::isfinite(logprob)) top[sanitize_utf8(codec_.token_text(token))] = logprob;  // as in chat
    }
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(text_chars.chars());
    text_chars.push(bytes);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

nlohmann::json ResponseFormatter::role_chunk() const {
  nlohmann::json chunk = chunk_base();
  if (s_.token_ids) chunk["prompt_token_ids"] = s_.prompt_token_ids;
  chunk["choices"] = nlohmann::json::array(
      {{{"index", 0},
        {"delta", {{"role", "assistant"}, {"content", ""}}},
        {"logprobs", nullptr},
        {"finish_reason", nullptr}}});
  return chunk;
}

void ResponseFormatter::put_prompt_token_ids(nlohmann::json& chunk) const {
  if (s_.token_ids && s_.endpoint != Endpoint::Chat) chunk["choices"][0]["prompt_token_ids"] = s_.prompt_token_ids;
}

nlohmann::json ResponseFormatter::delta_chunk(const OutputDelta& d, Utf8CharCounter* text_chars) const {
  nlohmann::json chunk = chunk_base();
  nlohmann::json choice = {{"index", 0}};
  nlohmann::json logprobs = nullptr;
  if (s_.logprobs && !d.logprobs.empty()) {
    Utf8CharCounter from_zero;
    logprobs = s_.endpoint == Endpoint::Chat
                   ? chat_logprobs(d.logprobs)
                   : completion_logprobs(d.logprobs, text_chars ? *text_chars : from_zero);
  }
  if (s_.endpoint == Endpoint::Chat) {
    nlohmann::json delta = nlohmann::json::object();
    if (!d.reasoning.empty()) put_reasoning(delta, d.reasoning);
    if (!d.content.empty() || (d.reasoning.empty() && d.tool_calls.empty())) {
      delta["content"] = d.content;
    }
    if (!d.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(d.tool_calls, true);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = d.content;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = nullptr;
  if (s_.token_ids) choice["token_ids"] = d.token_ids;
  chunk["choices"] = nlohmann::json::array({std::move(choice)});
  return chunk;
}

nlohmann::json ResponseFormatter::finish_chunk(const char* finish_reason) const {
  nlohmann::json chunk = chunk_base();
  nlohmann::json choice = {{"index", 0}};
  if (s_.endpoint == Endpoint::Chat) {
    choice["delta"] = nlohmann::json::object();
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  if (s_.token_ids) choice["token_ids"] = nlohmann::json::array();
  chunk["choices"] = nlohmann::json::array({std::move(choice)});
  return chunk;
}

nlohmann::json ResponseFormatter::usage_chunk(const Usage& usage) const {
  nlohmann::json chunk = chunk_base();
  chunk["choices"] = nlohmann::json::array();
  chunk["usage"] = usage_json(usage);
  return chunk;
}

nlohmann::json ResponseFormatter::final_body(const OutputDelta& all, const char* finish_reason,
                                             const Usage& usage) const {
  const bool chat = s_.endpoint == Endpoint::Chat;
  nlohmann::json body = {{"id", s_.id},
                         {"object", chat ? "chat.completion" : "text_completion"},
                         {"created", s_.created},
                         {"model", s_.model}};
  nlohmann::json choice = {{"index", 0}};
  if (chat) {
    nlohmann::json message = {{"role", "assistant"}, {"content", all.content}};
    if (all.content.empty() && !all.tool_calls.empty()) message["content"] = nullptr;
    if (!all.reasoning.empty()) put_reasoning(message, all.reasoning);
    if (!all.tool_calls.empty()) message["tool_calls"] = tool_calls_json(all.tool_calls, false);
    message["refusal"] = nullptr;
    choice["message"] = std::move(message);
  } else {
    choice["text"] = all.content;
  }
  nlohmann::json logprobs = nullptr;
  if (s_.logprobs) {
    Utf8CharCounter text_chars;
    logprobs = chat ? chat_logprobs(all.logprobs) : completion_logprobs(all.logprobs, text_chars);
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason;
  if (s_.token_ids) {
    if (!chat) choice["prompt_token_ids"] = s_.prompt_token_ids;
    choice["token_ids"] = all.token_ids;
  }
  body["choices"] = nlohmann::json::array({std::move(choice)});
  if (s_.token_ids && chat) body["prompt_token_ids"] = s_.prompt_token_ids;
  body["usage"] = usage_json(usage);
  return body;
}

}  // namespace deltaserve::server
