// Turns one request's engine events into client-visible output: incremental detokenisation,
// stop tokens and stop strings, the <think> split, the token limit, exact usage. Knows no
// I/O: the session writes what on_event returns (as SSE chunks, or gathered into one body).
//
// Usage counts emitted tokens only: when a stop string or stop token falls inside a block of
// accepted drafts, the tokens after it are neither shown nor counted.
// One per request, used from its session's strand only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/stop_string_matcher.h"
#include "scheduler/request.h"
#include "server/openai_response.h"
#include "server/reasoning_splitter.h"
#include "server/text_codec.h"
#include "server/tool_call_parser.h"

namespace deltaserve::server {

struct GenerationSetup {
  int32_t num_prompt_tokens = 0;
  int32_t max_tokens = 0;                 // emitted tokens at most (> 0)
  std::vector<std::string> stop;          // stop strings
  bool include_stop_in_output = false;
  std::vector<int32_t> stop_token_ids;    // end with "stop"; counted, never shown
  bool skip_special_tokens = true;
  bool split_reasoning = false;           // chat with a reasoning model
  bool starts_in_reasoning = false;       // the prompt left a <think> block open
  bool logprobs = false;
  bool token_ids = false;                 // OutputDelta::token_ids: every counted token's id
  bool parse_tool_calls = false;          // chat with tools: calls leave the content
  ToolParamTypes tool_param_types;        // which XML parameter values are JSON
  bool forced_tool_calls = false;         // tool_choice "required" / named: output is calls only
  // parallel_tool_calls false (Anthropic: disable_parallel_tool_use): at most one call, so the
  // output ends ("tool_calls") once the first call is closed, whatever the tool_choice.
  bool single_tool_call = false;
};

// What one event produced.
struct StepOutput {
  OutputDelta delta;
  // Further deltas of the same step, in order. Within a delta the order is reasoning,
  // content, tool-call pieces; text that follows a call piece opens the next delta, so the
  // block APIs see content and calls in the order the model wrote them.
  std::vector<OutputDelta> more;
  // "stop" | "length" | "tool_calls" (a natural stop after at least one parsed call): the
  // request ended normally
  const char* finish_reason = nullptr;
  std::optional<std::string> error;     // it ended abnormally (engine error, cancelled)
  std::optional<std::string> stop_string;  // "stop" by this stop string (Anthropic's stop_sequence)
  bool cancel_engine = false;           // it ended here, not in the engine: cancel the id
  bool done() const { return finish_reason != nullptr || error.has_value(); }
};

class GenerationState {
 public:
  GenerationState(const TextCodec& codec, GenerationSetup setup);

  // Events after the end are ignored (the engine may still deliver a cancellation).
  StepOutput on_event(const scheduler::RequestEvent& event);
  bool done() const { return done_; }
  const Usage& usage() const { return usage_; }

 private:
  void consume_text(const std::string& text, StepOutput& out, bool count_token);
  void flush(StepOutput& out);
  // Answer text on its way out: through the think split (when on), then the tool-call parser.
  void put_text(StepOutput& out, const std::string& text);
  void put_pieces(StepOutput& out, ReasoningSplitter::Pieces pieces);
  void put_tool_pieces(StepOutput& out, const ToolCallParser::Pieces& parsed);
  bool is_stop_token(int32_t token) const;

  GenerationSetup setup_;
  std::unique_ptr<TokenStreamDecoder> decoder_;
  runtime::StopStringMatcher stop_;
  std::optional<ReasoningSplitter> splitter_;
  std::optional<ToolCallParser> tool_parser_;
  Usage usage_;
  bool stop_matched_ = false;
  bool single_call_closed_ = false;  // single_tool_call: the call is whole, nothing follows
  int32_t stop_index_ = -1;  // the stop string that matched
  bool done_ = false;
};

}  // namespace deltaserve::server
