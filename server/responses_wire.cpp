#include "server/responses_wire.h"

#include "server/generation_job.h"

namespace deltaserve::server {
namespace {

nlohmann::json usage_json(const Usage& usage) {
  return {{"input_tokens", usage.num_prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.num_cached_prompt_tokens}}},
          {"output_tokens", usage.num_completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", usage.num_reasoning_tokens}}},
          {"total_tokens", usage.num_prompt_tokens + usage.num_completion_tokens}};
}

nlohmann::json text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", nlohmann::json::array()},
          {"logprobs", nlohmann::json::array()}};
}

nlohmann::json reasoning_part(const std::string& text) { return {{"type", "reasoning_text"}, {"text", text}}; }

// One output item; `done`: its content is whole (not while a stream fills it); `status`:
// in_progress while it is filled, completed, or incomplete for the item that max_output_tokens
// cut (OpenAI marks that one item so, the response incomplete around it).
nlohmann::json item_json(const OutputBlock& block, const std::string& id, bool done, const char* status) {
  switch (block.kind) {
    case BlockKind::Reasoning: {
      nlohmann::json content = nlohmann::json::array();
      if (done) content.push_back(reasoning_part(block.text));
      return {{"type", "reasoning"}, {"id", id}, {"summary", nlohmann::json::array()},
              {"content", std::move(content)}, {"status", status}};
    }
    case BlockKind::Text: {
      nlohmann::json content = nlohmann::json::array();
      if (done) content.push_back(text_part(block.text));
      return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"},
              {"content", std::move(content)}};
    }
    case BlockKind::ToolCall:
      return {{"type", "function_call"}, {"id", id}, {"call_id", block.call.id},
              {"name", block.call.name}, {"arguments", done ? block.call.arguments : ""},
              {"status", status}};
  }
  return nullptr;
}

const char* id_prefix(BlockKind kind) {
  switch (kind) {
    case BlockKind::Reasoning: return "rs_";
    case BlockKind::Text: return "msg_";
    case BlockKind::ToolCall: return "fc_";
  }
  return "item_";
}

}  // namespace

const std::string& ResponsesWire::item_id(size_t index, BlockKind kind) {
  while (item_ids_.size() <= index) item_ids_.push_back(make_request_id(id_prefix(kind)));
  return item_ids_[index];
}

std::string ResponsesWire::event(nlohmann::json value) {
  value["sequence_number"] = sequence_number_++;
  std::string out = "event: ";
  out += value["type"].get<std::string>();
  out += "\ndata: ";
  out += json_text(value);
  out += "\n\n";
  return out;
}

nlohmann::json ResponsesWire::response_json(const std::vector<OutputBlock>& blocks,
                                            const StepOutput* end, const Usage* usage) {
  nlohmann::json output = nlohmann::json::array();
  const bool cut = end && end->finish_reason && std::string_view(end->finish_reason) == "length";
  for (size_t i = 0; i < blocks.size(); ++i) {
    const char* status = cut && i + 1 == blocks.size() ? "incomplete" : "completed";
    output.push_back(item_json(blocks[i], item_id(i, blocks[i].kind), true, status));
  }
  nlohmann::json r = {{"id", s_.id},
                      {"object", "response"},
                      {"created_at", s_.created_at},
                      {"status", !end ? "in_progress" : cut ? "incomplete" : "completed"},
                      {"background", false},
                      {"error", nullptr},
                      {"incomplete_details", cut ? nlohmann::json{{"reason", "max_output_tokens"}}
                                                 : nlohmann::json()},
                      {"model", s_.model},
                      {"output", std::move(output)}};
  for (const auto& [key, value] : s_.echo.items()) r[key] = value;
  r["usage"] = usage ? usage_json(*usage) : nlohmann::json();
  return r;
}

std::string ResponsesWire::stream_start(const Usage&) {
  const nlohmann::json response = response_json({}, nullptr, nullptr);
  std::string out = event({{"type", "response.created"}, {"response", response}});
  out += event({{"type", "response.in_progress"}, {"response", response}});  // after: sequence numbers
  return out;
}

std::string ResponsesWire::events(const std::vector<BlockEvent>& events) {
  std::string out;
  for (const BlockEvent& e : events) {
    const auto index = static_cast<size_t>(e.index);
    const OutputBlock& block = blocks_.blocks()[index];
    const std::string id = item_id(index, block.kind);
    const nlohmann::json where = {{"item_id", id}, {"output_index", e.index}};
    auto with = [&where](nlohmann::json value) {
      for (const auto& [key, v] : where.items()) value[key] = v;
      return value;
    };
    switch (e.type) {
      case BlockEvent::Type::Start:
        out += event({{"type", "response.output_item.added"}, {"output_index", e.index},
                      {"item", item_json(block, id, false, "in_progress")}});
        // Reasoning text is a content part too: the SDKs' stream accumulators add the part
        // on content_part.added and append the deltas to it.
        if (block.kind == BlockKind::Text || block.kind == BlockKind::Reasoning) {
          out += event(with({{"type", "response.content_part.added"}, {"content_index", 0},
                             {"part", block.kind == BlockKind::Text ? text_part("") : reasoning_part("")}}));
        }
        break;
      case BlockEvent::Type::Delta:
        if (block.kind == BlockKind::Reasoning) {
          out += event(with({{"type", "response.reasoning_text.delta"}, {"content_index", 0},
                             {"delta", e.text}}));
        } else if (block.kind == BlockKind::Text) {
          out += event(with({{"type", "response.output_text.delta"}, {"content_index", 0},
                             {"delta", e.text}, {"logprobs", nlohmann::json::array()}}));
        } else {
          out += event(with({{"type", "response.function_call_arguments.delta"}, {"delta", e.text}}));
        }
        break;
      case BlockEvent::Type::Stop:
        if (block.kind == BlockKind::Reasoning) {
          out += event(with({{"type", "response.reasoning_text.done"}, {"content_index", 0},
                             {"text", block.text}}));
          out += event(with({{"type", "response.content_part.done"}, {"content_index", 0},
                             {"part", reasoning_part(block.text)}}));
        } else if (block.kind == BlockKind::Text) {
          out += event(with({{"type", "response.output_text.done"}, {"content_index", 0},
                             {"text", block.text}, {"logprobs", nlohmann::json::array()}}));
          out += event(with({{"type", "response.content_part.done"}, {"content_index", 0},
                             {"part", text_part(block.text)}}));
        } else {
          out += event(with({{"type", "response.function_call_arguments.done"},
                             {"name", block.call.name}, {"arguments", block.call.arguments}}));
        }
        out += event({{"type", "response.output_item.done"}, {"output_index", e.index},
                      {"item", item_json(block, id, true, closing_status_)}});
        break;
    }
  }
  return out;
}

std::string ResponsesWire::stream_delta(const OutputDelta& delta, const Usage&) {
  return events(blocks_.push(delta));
}

void ResponsesWire::store(const std::vector<OutputBlock>& blocks, const nlohmann::json& response) {
  if (!s_.store) return;
  RequestJson assistant = {{"role", "assistant"}, {"content", ""}};
  std::string reasoning;
  for (const OutputBlock& block : blocks) {
    if (block.kind == BlockKind::Reasoning) {
      reasoning += block.text;
    } else if (block.kind == BlockKind::Text) {
      assistant["content"] = assistant["content"].get<std::string>() + block.text;
    } else {
      if (!assistant.contains("tool_calls")) assistant["tool_calls"] = RequestJson::array();
      assistant["tool_calls"].push_back(
          {{"id", block.call.id},
           {"type", "function"},
           {"function", {{"name", block.call.name}, {"arguments", block.call.arguments}}}});
    }
  }
  if (!reasoning.empty()) assistant["reasoning_content"] = reasoning;
  RequestJson conversation = std::move(s_.history);
  conversation.push_back(std::move(assistant));
  s_.store->put(s_.id, {std::move(conversation), json_text(response), std::move(s_.input_items)});
}

void ResponsesWire::stream_ending(const StepOutput& end) {
  // The blocks the ending step closes are the ones the token limit cut.
  if (end.finish_reason && std::string_view(end.finish_reason) == "length") closing_status_ = "incomplete";
}

std::string ResponsesWire::stream_finish(const StepOutput& end, const Usage& usage) {
  stream_ending(end);  // the blocks still open are the one the token limit cut
  std::string out = events(blocks_.finish());
  const nlohmann::json response = response_json(blocks_.blocks(), &end, &usage);
  store(blocks_.blocks(), response);
  const bool cut = response["status"] == "incomplete";
  out += event({{"type", cut ? "response.incomplete" : "response.completed"}, {"response", response}});
  return out;
}

std::string ResponsesWire::stream_error(const ApiError& error) {
  return event({{"type", "error"},
                {"code", error.code.empty() ? nlohmann::json() : nlohmann::json(error.code)},
                {"message", error.message},
                {"param", error.param.empty() ? nlohmann::json() : nlohmann::json(error.param)}});
}

void ResponsesWire::gather(const OutputDelta& delta) { (void)blocks_.push(delta); }

std::string ResponsesWire::body(const OutputDelta& all, const StepOutput& end, const Usage& usage) {
  const std::vector<OutputBlock> blocks = blocks_.whole(all);
  const nlohmann::json response = response_json(blocks, &end, &usage);
  store(blocks, response);
  return json_text(response);
}

}  // namespace deltaserve::server
