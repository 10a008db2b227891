#include "server/wire_format.h"

namespace deltaserve::server {

std::string OpenAiWire::stream_start(const Usage&) {
  if (formatter_.setup().endpoint != Endpoint::Chat) return "";
  return sse_event(formatter_.role_chunk());
}

std::string OpenAiWire::stream_delta(const OutputDelta& delta, const Usage& usage) {
  nlohmann::json chunk = formatter_.delta_chunk(delta, &logprob_chars_);
  if (continuous_usage_) chunk["usage"] = ResponseFormatter::usage_json(usage);
  if (!prompt_ids_sent_) formatter_.put_prompt_token_ids(chunk);
  prompt_ids_sent_ = true;
  return sse_event(chunk);
}

std::string OpenAiWire::stream_finish(const StepOutput& end, const Usage& usage) {
  nlohmann::json finish = formatter_.finish_chunk(end.finish_reason);
  if (!prompt_ids_sent_) formatter_.put_prompt_token_ids(finish);  // a stream that sent no delta
  prompt_ids_sent_ = true;
  std::string out = sse_event(finish);
  if (include_usage_) out += sse_event(formatter_.usage_chunk(usage));
  out += kSseDone;
  return out;
}

std::string OpenAiWire::stream_error(const ApiError& error) {
  return sse_event(error.body()) + std::string(kSseDone);
}

std::string OpenAiWire::body(const OutputDelta& all, const StepOutput& end, const Usage& usage) {
  return json_text(formatter_.final_body(all, end.finish_reason, usage));
}

}  // namespace deltaserve::server
