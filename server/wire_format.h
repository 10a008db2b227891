// How one generation's output is written on the wire. The pipeline (GenerationJob ->
// GenerationState -> GenerationStream) is the same for every API; only the framing differs:
//   OpenAiWire       /v1/chat/completions, /v1/completions (openai_response.h's grammar)
//   AnthropicWire    /v1/messages (anthropic_wire.h)
//   ResponsesWire    /v1/responses (responses_wire.h)
// The stream calls stream_start once after the headers, stream_delta per non-empty delta,
// then exactly one of stream_finish / stream_error; a non-streamed request calls body or
// error_body once. Each returns the bytes to write (SSE events for streams).
// One per request, used from its session's strand only.
#pragma once

#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/generation_state.h"
#include "server/openai_response.h"

namespace deltaserve::server {

class WireFormat {
 public:
  virtual ~WireFormat() = default;
  virtual std::string stream_start(const Usage& usage) = 0;
  virtual std::string stream_delta(const OutputDelta& delta, const Usage& usage) = 0;
  // Streams: called with the step that finishes the request before its deltas go to
  // stream_delta, since they may close a block that the finish cut (a tool call closed at the
  // token limit) and the block's closing event must say so.
  virtual void stream_ending(const StepOutput& /*end*/) {}
  // `end` is the step that finished the request (finish_reason set).
  virtual std::string stream_finish(const StepOutput& end, const Usage& usage) = 0;
  virtual std::string stream_error(const ApiError& error) = 0;
  virtual std::string body(const OutputDelta& all, const StepOutput& end, const Usage& usage) = 0;
  // Non-streamed requests: each delta as it comes, before body(). The block APIs keep the
  // deltas' order of text and tool calls from it (the merged `all` puts all text first).
  virtual void gather(const OutputDelta&) {}
  virtual std::string error_body(const ApiError& error) const { return error.body_text(); }
};

// OpenAI chat completions and completions, as ResponseFormatter shapes them.
class OpenAiWire final : public WireFormat {
 public:
  OpenAiWire(ResponseFormatter::Setup setup, const TextCodec& codec, bool include_usage,
             bool continuous_usage)
      : formatter_(std::move(setup), codec),
        include_usage_(include_usage),
        continuous_usage_(continuous_usage) {}

  std::string stream_start(const Usage& usage) override;
  std::string stream_delta(const OutputDelta& delta, const Usage& usage) override;
  std::string stream_finish(const StepOutput& end, const Usage& usage) override;
  std::string stream_error(const ApiError& error) override;
  std::string body(const OutputDelta& all, const StepOutput& end, const Usage& usage) override;

 private:
  ResponseFormatter formatter_;
  const bool include_usage_;
  const bool continuous_usage_;
  bool prompt_ids_sent_ = false;  // completions streams: the first chunk carries them
  Utf8CharCounter logprob_chars_;  // completions logprobs: the next chunk's first text_offset
};

}  // namespace deltaserve::server
