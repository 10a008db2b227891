#include "server/anthropic_wire.h"

#include <string_view>

namespace deltaserve::server {
namespace {

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: break;
  }
  return status >= 500 ? "api_error" : "invalid_request_error";
}

// "toolu_" ids: the parser's "call_<24 alnum>" with Anthropic's prefix.
std::string tool_use_id(const ToolCall& call) {
  const std::string_view id = call.id;
  return "toolu_" + std::string(id.starts_with("call_") ? id.substr(5) : id);
}

nlohmann::json tool_input(const ToolCall& call) {
  try {
    return nlohmann::json::parse(call.arguments);
  } catch (const nlohmann::json::exception&) {
    return nlohmann::json::object();  // the parser only emits objects; never reached
  }
}

nlohmann::json usage_json(const Usage& usage) {
  return {{"input_tokens", usage.num_prompt_tokens - usage.num_cached_prompt_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", usage.num_cached_prompt_tokens},
          {"output_tokens", usage.num_completion_tokens}};
}

nlohmann::json block_json(const OutputBlock& block) {
  switch (block.kind) {
    case BlockKind::Reasoning:
      return {{"type", "thinking"}, {"thinking", block.text}, {"signature", ""}};
    case BlockKind::Text:
      return {{"type", "text"}, {"text", block.text}};
    case BlockKind::ToolCall:
      return {{"type", "tool_use"},
              {"id", tool_use_id(block.call)},
              {"name", block.call.name},
              {"input", tool_input(block.call)}};
  }
  return nullptr;
}

}  // namespace

nlohmann::json anthropic_error_json(const ApiError& error) {
  return {{"type", "error"}, {"error", {{"type", error_type(error.status)}, {"message", error.message}}}};
}

std::string sse_named_event(const nlohmann::json& value) {
  std::string out = "event: ";
  out += value.value("type", "message");
  out += "\ndata: ";
  out += json_text(value);
  out += "\n\n";
  return out;
}

const char* AnthropicWire::stop_reason(const StepOutput& end) {
  const std::string_view reason = end.finish_reason ? end.finish_reason : "stop";
  if (reason == "length") return "max_tokens";
  if (reason == "tool_calls") return "tool_use";
  return end.stop_string ? "stop_sequence" : "end_turn";
}

std::string AnthropicWire::stream_start(const Usage& usage) {
  Usage start = usage;
  start.num_completion_tokens = 0;
  const nlohmann::json message = {{"id", id_},
                                  {"type", "message"},
                                  {"role", "assistant"},
                                  {"model", model_},
                                  {"content", nlohmann::json::array()},
                                  {"stop_reason", nullptr},
                                  {"stop_sequence", nullptr},
                                  {"usage", usage_json(start)}};
  std::string out = sse_named_event({{"type", "message_start"}, {"message", message}});
  out += sse_named_event({{"type", "ping"}});
  return out;
}

std::string AnthropicWire::events(const std::vector<BlockEvent>& events) const {
  std::string out;
  for (const BlockEvent& e : events) {
    const OutputBlock& block = blocks_.blocks()[static_cast<size_t>(e.index)];
    switch (e.type) {
      case BlockEvent::Type::Start: {
        nlohmann::json start = block_json(OutputBlock{block.kind, "", block.call});
        if (block.kind == BlockKind::ToolCall) start["input"] = nlohmann::json::object();
        out += sse_named_event({{"type", "content_block_start"}, {"index", e.index},
                                {"content_block", std::move(start)}});
        break;
      }
      case BlockEvent::Type::Delta: {
        nlohmann::json delta;
        if (e.kind == BlockKind::Reasoning) {
          delta = {{"type", "thinking_delta"}, {"thinking", e.text}};
        } else if (e.kind == BlockKind::Text) {
          delta = {{"type", "text_delta"}, {"text", e.text}};
        } else {
          delta = {{"type", "input_json_delta"}, {"partial_json", e.text}};
        }
        out += sse_named_event({{"type", "content_block_delta"}, {"index", e.index},
                                {"delta", std::move(delta)}});
        break;
      }
      case BlockEvent::Type::Stop:
        out += sse_named_event({{"type", "content_block_stop"}, {"index", e.index}});
        break;
    }
  }
  return out;
}

std::string AnthropicWire::stream_delta(const OutputDelta& delta, const Usage&) {
  return events(blocks_.push(delta));
}

std::string AnthropicWire::stream_finish(const StepOutput& end, const Usage& usage) {
  std::string out = events(blocks_.finish());
  nlohmann::json stop_sequence = end.stop_string ? nlohmann::json(*end.stop_string) : nlohmann::json();
  out += sse_named_event({{"type", "message_delta"},
                          {"delta", {{"stop_reason", stop_reason(end)}, {"stop_sequence", stop_sequence}}},
                          {"usage", usage_json(usage)}});
  out += sse_named_event({{"type", "message_stop"}});
  return out;
}

std::string AnthropicWire::stream_error(const ApiError& error) {
  return sse_named_event(anthropic_error_json(error));
}

void AnthropicWire::gather(const OutputDelta& delta) { (void)blocks_.push(delta); }

std::string AnthropicWire::body(const OutputDelta& all, const StepOutput& end, const Usage& usage) {
  nlohmann::json content = nlohmann::json::array();
  for (const OutputBlock& block : blocks_.whole(all)) content.push_back(block_json(block));
  const nlohmann::json message = {
      {"id", id_},
      {"type", "message"},
      {"role", "assistant"},
      {"model", model_},
      {"content", std::move(content)},
      {"stop_reason", stop_reason(end)},
      {"stop_sequence", end.stop_string ? nlohmann::json(*end.stop_string) : nlohmann::json()},
      {"usage", usage_json(usage)}};
  return json_text(message);
}

std::string AnthropicWire::error_body(const ApiError& error) const {
  return json_text(anthropic_error_json(error));
}

}  // namespace deltaserve::server
