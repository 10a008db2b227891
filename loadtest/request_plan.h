// What one request of a run is meant to do (RequestPlan) and what happened (RequestResult).
// Plans are built by PromptSource (normal requests) and SoakMix (the abuse kinds); the
// RequestRunner executes them; judge_result() compares the outcome with the plan.
// Plain values; one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltaserve::loadtest {

enum class RequestKind {
  ChatStream,         // well-formed streaming chat
  CompletionStream,   // well-formed streaming completion
  NonStream,          // well-formed, stream = false (chat or completion)
  SlowReader,         // streaming, read a few bytes at a time with pauses
  CancelBeforeToken,  // client closes after sending / after the header, before any token
  CancelMidStream,    // client closes after k token chunks
  CancelAtStep,       // client closes the instant a chunk lands (the engine is mid-step)
  InvalidJson,
  InvalidUtf8,
  OversizeBody,
  AbsurdParams,
  MissingParams,
  OverContext,
  BadHttp,            // malformed HTTP, wrong method, unknown route
  Burst,              // a well-formed streaming chat fired with many others at once
};
inline constexpr int kNumRequestKinds = 15;

const char* request_kind_name(RequestKind kind);
bool parse_request_kind(const std::string& name, RequestKind& kind);

// How the outcome is judged.
enum class Expect {
  Complete,     // 200 and a finish_reason (+ [DONE] and usage when streamed); 429 only under pressure
  ClientCancel, // anything but a 5xx, an error event or a server-side hang
  Status,       // one of expected_statuses with an OpenAI error body
};

struct RequestPlan {
  RequestKind kind = RequestKind::ChatStream;
  std::string variant;          // the case within the kind, e.g. "temperature=9"
  std::string method = "POST";
  std::string path;             // e.g. "/v1/chat/completions" (without the URL's base path)
  std::string body;
  std::string raw;              // non-empty: these bytes are sent as they are (no framing)
  bool stream = false;
  bool fresh_connection = false;  // a new connection, closed afterwards
  Expect expect = Expect::Complete;
  std::vector<unsigned> expected_statuses;
  bool cancel_after_send = false;  // close as soon as the request is written
  int cancel_after_chunks = -1;    // >= 0: close after this many token chunks (0 = after the header)
  bool cancel_on_multi_token = false;  // close at the first chunk carrying >1 token (a verify step)
  bool slow = false;
  bool in_burst = false;
  // Multi-turn token conversations: prompt tokens an ideal prefix cache could reuse (the
  // previous turn's prompt and answer, resent as ids); -1 unknown.
  int64_t reusable_prompt_tokens = -1;
};

struct RequestResult {
  RequestKind kind = RequestKind::ChatStream;
  std::string variant;
  bool in_burst = false;
  bool warmup = false;
  bool stream = false;
  double start_s = 0.0;     // since the run started
  double ttft_ms = -1.0;    // -1: no token arrived
  double e2e_ms = 0.0;
  unsigned status = 0;      // 0: no response
  std::string error_type;   // OpenAI error.type (error body or stream error event)
  std::string error_code;
  std::string transport_error;  // connect / timeout / reset / truncated ...
  std::string finish_reason;
  int num_finish_reasons = 0;
  bool done_marker = false;     // data: [DONE]
  bool has_usage = false;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::vector<double> itl_ms;   // per token after the first (exact with continuous usage)
  std::string content;          // the answer's text (chat delta.content / completion text)
  // With return_token_ids in the body: the ids the server reported for the prompt and the
  // output (the multi-turn workload's token conversations resend them).
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  int64_t cached_tokens = 0;    // usage.prompt_tokens_details.cached_tokens (prefix cache)
  int64_t reusable_prompt_tokens = -1;  // the plan's (RequestPlan::reusable_prompt_tokens)
  int32_t turn = -1;            // multi-turn workload: 0-based turn of its conversation
  int num_multi_token_chunks = 0;  // chunks with > 1 token: accepted drafts or held-back text
  double decode_tokens_per_s = 0.0;  // (tokens - 1) / (last token - first token)
  bool cancelled = false;       // the tool closed the connection on purpose
  std::string failure;          // empty: the outcome is what the plan allows

  // A stable category for "errors by type" ("" for a clean completion or a planned cancel).
  std::string error_key() const;
};

// Fills result.failure. `pressure` = a burst (or more requests than slots + queue) is in
// flight, which is what earns a 429.
void judge_result(const RequestPlan& plan, RequestResult& result, bool pressure);

}  // namespace deltaserve::loadtest
