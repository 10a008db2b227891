// OpenAI response shapes, built from what a request produced: chat.completion and
// text_completion bodies, their stream chunks, the usage object, SSE framing. The stream
// grammar this serves (generation_state.h decides when each piece is due):
//   chat:        role chunk, content/reasoning/tool_calls delta chunks (a call's first
//                piece with index, id, type, name; then its arguments fragments with the
//                index only), one finish chunk with an empty
//                delta, [usage chunk with "choices": []], data: [DONE]
//   completions: text chunks, one finish chunk with empty text, [usage chunk], data: [DONE]
// Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/request.h"
#include "server/openai_schema.h"
#include "server/text_codec.h"
#include "server/tool_call_parser.h"
#include "server/utf8.h"

namespace deltaserve::server {

enum class Endpoint { Chat, Completion };

struct Usage {
  int32_t num_prompt_tokens = 0;
  int32_t num_completion_tokens = 0;  // emitted tokens only (nothing past a stop)
  int32_t num_reasoning_tokens = 0;   // of the completion tokens, those inside <think>
  int32_t num_cached_prompt_tokens = 0;
};

// One piece of output as the client sees it.
struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<scheduler::TokenLogprob> logprobs;  // the tokens that produced it
  std::vector<ToolCall> tool_calls;  // call pieces of this delta (a whole output: whole calls)
  // With GenerationSetup::token_ids: the ids of the tokens counted in this delta (usage's
  // completion tokens, a stop token included); empty otherwise.
  std::vector<int32_t> token_ids;
  bool empty() const {
    return reasoning.empty() && content.empty() && logprobs.empty() && tool_calls.empty() && token_ids.empty();
  }
};

// JSON text that never throws on invalid UTF-8 (it is replaced with U+FFFD).
std::string json_text(const nlohmann::json& value);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& value);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// An SSE comment: keeps an idle stream open through proxies; clients skip it.
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

class ResponseFormatter {
 public:
  struct Setup {
    Endpoint endpoint = Endpoint::Chat;
    std::string id;       // chatcmpl-... / cmpl-...
    int64_t created = 0;  // unix seconds
    std::string model;
    ReasoningField reasoning_field = ReasoningField::ReasoningContent;
    bool usage_null_in_chunks = false;  // include_usage: every other chunk has "usage": null
    bool logprobs = false;
    // return_token_ids: chat responses carry "prompt_token_ids" at the top (streams: in the
    // role chunk), completions in the choice (streams: the first chunk's); every choice
    // carries the "token_ids" of its text (streams: of each chunk), as vLLM does.
    bool token_ids = false;
    std::vector<int32_t> prompt_token_ids;
  };

  ResponseFormatter(Setup setup, const TextCodec& codec) : s_(std::move(setup)), codec_(codec) {}

  nlohmann::json role_chunk() const;  // chat only
  // Completions streams: the prompt's ids into a chunk's choice (its first one; token_ids on).
  void put_prompt_token_ids(nlohmann::json& chunk) const;
  // Completions logprobs: each token's text_offset is `text_chars`'s count before it, and the
  // counter moves on over the chunk's tokens (a stream keeps one, so the offsets run on across
  // chunks); null counts from 0.
  nlohmann::json delta_chunk(const OutputDelta& delta, Utf8CharCounter* text_chars = nullptr) const;
  nlohmann::json finish_chunk(const char* finish_reason) const;
  nlohmann::json usage_chunk(const Usage& usage) const;
  nlohmann::json final_body(const OutputDelta& all, const char* finish_reason,
                            const Usage& usage) const;

  static nlohmann::json usage_json(const Usage& usage);
  const Setup& setup() const { return s_; }

 private:
  nlohmann::json chunk_base() const;
  nlohmann::json chat_logprobs(const std::vector<scheduler::TokenLogprob>& lps) const;
  nlohmann::json completion_logprobs(const std::vector<scheduler::TokenLogprob>& lps,
                                     Utf8CharCounter& text_chars) const;
  void put_reasoning(nlohmann::json& target, const std::string& reasoning) const;

  Setup s_;
  const TextCodec& codec_;
};

}  // namespace deltaserve::server
