// Anthropic Messages API responses for /v1/messages, from the same generation output the
// chat API gets. The body is a `message` object; a stream is Anthropic's event sequence:
//   message_start (usage.input_tokens), ping,
//   per block: content_block_start, content_block_delta* (text_delta | thinking_delta |
//              input_json_delta), content_block_stop,
//   message_delta (stop_reason, stop_sequence, usage.output_tokens), message_stop
// or, on a failure mid-stream, an `error` event. Each SSE event carries `event: <type>`.
// stop_reason: end_turn, stop_sequence (with the matched string), max_tokens, tool_use.
// Errors everywhere on these routes: {"type": "error", "error": {"type", "message"}}.
// One per request, used from its session's strand only.
#pragma once

#include <string>

#include "server/output_blocks.h"
#include "server/wire_format.h"

namespace deltaserve::server {

// Anthropic's error object for an ApiError (the HTTP status stays the ApiError's).
nlohmann::json anthropic_error_json(const ApiError& error);
// "event: <type>\ndata: <json>\n\n"
std::string sse_named_event(const nlohmann::json& value);

class AnthropicWire final : public WireFormat {
 public:
  AnthropicWire(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}

  std::string stream_start(const Usage& usage) override;
  std::string stream_delta(const OutputDelta& delta, const Usage& usage) override;
  std::string stream_finish(const StepOutput& end, const Usage& usage) override;
  std::string stream_error(const ApiError& error) override;
  std::string body(const OutputDelta& all, const StepOutput& end, const Usage& usage) override;
  void gather(const OutputDelta& delta) override;
  std::string error_body(const ApiError& error) const override;

  static const char* stop_reason(const StepOutput& end);

 private:
  std::string events(const std::vector<BlockEvent>& events) const;

  const std::string id_;
  const std::string model_;
  OutputBlocks blocks_;
};

}  // namespace deltaserve::server
