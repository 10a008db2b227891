// OpenAI request bodies parsed and validated into typed structs. Every rejection is an
// ApiException carrying a 400 whose `param` names the field ("messages[1].content",
// "stop[2]", "logit_bias.123") and whose message says what was expected. Nothing here
// tokenizes or touches the engine: limits that need the model (context length) are checked
// by the handler after tokenization. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampling_params.h"
#include "server/api_error.h"
#include "server/request_json.h"

namespace deltaserve::server {

// Where the thinking text goes in responses: OpenAI-compatible clients read
// `reasoning_content` (llama.cpp, SGLang, older vLLM); current vLLM writes `reasoning`.
enum class ReasoningField { ReasoningContent, Reasoning, Both };

std::optional<ReasoningField> parse_reasoning_field(std::string_view name);
const char* reasoning_field_name(ReasoningField field);

// Limits the parser enforces; filled from ServerConfig (and the model's vocabulary size once
// it is known; 0 = unknown, token ids then checked only for being non-negative).
struct SchemaLimits {
  int32_t max_logprobs = 20;      // top_logprobs / completions `logprobs` ceiling
  int32_t max_stop_strings = 16;
  int64_t num_vocab = 0;
  bool reject_unknown_fields = true;  // OpenAI does; a deployment may relax it
  JsonLimits json;                    // depth and size of the body, enforced while parsing
};

// Fields shared by /v1/chat/completions and /v1/completions.
struct GenerationParams {
  std::string model;                  // empty: the served model
  runtime::SamplingParams sampling;   // temperature, top_p, penalties, seed, logprobs...
  std::optional<int32_t> max_tokens;  // nullopt: the API's default, else up to the context
                                      // (or the server's --default-max-tokens)
  // The API's own default for an absent max_tokens; 0: the API has none. Completions: 16, as
  // OpenAI and vLLM (a prompt too near the context gets the room left, not a 400).
  int32_t api_default_max_tokens = 0;
  std::string max_tokens_param = "max_tokens";  // the field that set it, for 400 messages
  std::vector<std::string> stop;      // stop strings, matched on detokenised text
  std::vector<int32_t> stop_token_ids;  // vLLM extension
  bool ignore_eos = false;              // vLLM extension (benchmarks)
  int32_t draft_depth = -1;             // deltaserve extension: at most this many MTP drafts
                                        // per step (0 = no speculation); -1 = server default
  bool include_stop_str_in_output = false;
  // vLLM extension: the prompt's and the output's token ids in the response, so a client can
  // send a conversation's next turn as ids (a completions prompt) without re-tokenising the
  // output, whose text may tokenise differently from the ids the model produced.
  bool return_token_ids = false;
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats (vLLM)
  std::optional<ReasoningField> reasoning_field;  // per-request override (extension)
};

struct ChatRequest {
  GenerationParams params;
  // Messages normalised for the chat template: role (developer -> system), content as a
  // string, tool_calls with `arguments` parsed into objects, reasoning_content (the client
  // may send `reasoning` instead).
  RequestJson messages = RequestJson::array();
  RequestJson tools;        // null or the validated array, passed to the template
  RequestJson tool_choice;  // null, "none" | "auto" | "required" | {function}
  // OpenAI's parallel_tool_calls (default true; Anthropic: !disable_parallel_tool_use): a
  // forced call ("required" or a named function) may be one or more calls; false: exactly one.
  bool parallel_tool_calls = true;
  RequestJson response_format;  // null or {type: text|json_object|json_schema}
  // Where the client wrote the schema, for the 400 of a schema that cannot be constrained
  // (Responses: text.format.schema; Anthropic: output_config.format.schema).
  std::string response_format_schema_param = "response_format.json_schema.schema";
  RequestJson chat_template_kwargs = RequestJson::object();
  // The client's field of the first system (or developer) message that follows another
  // message, empty if none ("messages[2]", Responses: "input[1]"). Qwen's templates take one
  // system message, first: when the template fails on it, the 400 names this field.
  std::string late_system_param;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

struct CompletionRequest {
  GenerationParams params;
  std::optional<std::string> prompt_text;  // exactly one of the two is set
  std::optional<std::vector<int32_t>> prompt_tokens;
};

// POST /tokenize: either a prompt or chat messages (then the template is applied).
struct TokenizeRequest {
  std::optional<std::string> prompt;
  std::optional<ChatRequest> chat;
  bool add_special_tokens = true;
};

struct DetokenizeRequest {
  std::vector<int32_t> tokens;
};

// All four throw ApiException (400) on any problem with the body.
ChatRequest parse_chat_request(std::string_view body, const SchemaLimits& limits);
CompletionRequest parse_completion_request(std::string_view body, const SchemaLimits& limits);
TokenizeRequest parse_tokenize_request(std::string_view body, const SchemaLimits& limits);
DetokenizeRequest parse_detokenize_request(std::string_view body, const SchemaLimits& limits);

}  // namespace deltaserve::server
