// The agent APIs' wire formats: OutputBlocks' block sequence, Anthropic's event sequence and
// message body, the Responses event sequence, response object and previous_response_id store.
#include <gtest/gtest.h>

#include "server/anthropic_wire.h"
#include "server/responses_wire.h"

namespace deltaserve::server {
namespace {

ToolCall call(int32_t index, const std::string& args) {
  ToolCall c;
  c.index = index;
  c.id = "call_ABCDEFGHIJKLMNOPQRSTUVWX";
  c.name = "get_weather";
  c.arguments = args;
  return c;
}

OutputDelta delta(std::string reasoning, std::string content, std::vector<ToolCall> calls = {}) {
  OutputDelta d;
  d.reasoning = std::move(reasoning);
  d.content = std::move(content);
  d.tool_calls = std::move(calls);
  return d;
}

// The SSE events of `text` as (event name, data JSON), checking that the names match the types.
std::vector<nlohmann::json> parse_events(const std::string& text) {
  std::vector<nlohmann::json> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    const std::string event = text.substr(at, end - at);
    at = end + 2;
    const size_t newline = event.find('\n');
    EXPECT_EQ(event.substr(0, 7), "event: ");
    EXPECT_EQ(event.substr(newline + 1, 6), "data: ");
    nlohmann::json data = nlohmann::json::parse(event.substr(newline + 7));
    EXPECT_EQ(event.substr(7, newline - 7), data["type"].get<std::string>());
    out.push_back(std::move(data));
  }
  return out;
}

std::vector<std::string> types(const std::vector<nlohmann::json>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e["type"]);
  return out;
}

TEST(OutputBlocks, OpensAndClosesBlocksInOrder) {
  OutputBlocks blocks;
  std::vector<BlockEvent> events = blocks.push(delta("a", ""));
  ASSERT_EQ(events.size(), 2u);  // start, delta
  events = blocks.push(delta("b", "c", {call(0, "{}"), call(1, R"({"x":1})")}));
  // reasoning delta; reasoning stop, text start + delta; text stop; 2 x (start, delta, stop)
  ASSERT_EQ(events.size(), 11u);
  EXPECT_EQ(events[1].type, BlockEvent::Type::Stop);
  EXPECT_EQ(events[2].kind, BlockKind::Text);
  EXPECT_EQ(events[10].index, 3);
  EXPECT_TRUE(blocks.finish().empty());  // a call closes itself
  ASSERT_EQ(blocks.blocks().size(), 4u);
  EXPECT_EQ(blocks.blocks()[0].text, "ab");
  const std::vector<OutputBlock> whole = OutputBlocks::of(delta("ab", "c", {call(0, "{}")}));
  ASSERT_EQ(whole.size(), 3u);
  EXPECT_EQ(whole[2].kind, BlockKind::ToolCall);
}

TEST(AnthropicWire, StreamEventSequence) {
  AnthropicWire wire("msg_1", "m");
  Usage usage;
  usage.num_prompt_tokens = 10;
  usage.num_cached_prompt_tokens = 4;
  std::string sse = wire.stream_start(usage);
  sse += wire.stream_delta(delta("think", ""), usage);
  sse += wire.stream_delta(delta("", "Hi"), usage);
  sse += wire.stream_delta(delta("", " there", {call(0, R"({"city":"Paris"})")}), usage);
  usage.num_completion_tokens = 7;
  StepOutput end;
  end.finish_reason = "tool_calls";
  sse += wire.stream_finish(end, usage);
  const auto events = parse_events(sse);
  EXPECT_EQ(types(events), (std::vector<std::string>{
                               "message_start", "ping",
                               "content_block_start", "content_block_delta", "content_block_stop",
                               "content_block_start", "content_block_delta", "content_block_delta",
                               "content_block_stop",
                               "content_block_start", "content_block_delta", "content_block_stop",
                               "message_delta", "message_stop"}));
  EXPECT_EQ(events[0]["message"]["usage"]["input_tokens"], 6);
  EXPECT_EQ(events[0]["message"]["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(events[2]["content_block"]["type"], "thinking");
  EXPECT_EQ(events[3]["delta"], nlohmann::json::parse(R"({"type":"thinking_delta","thinking":"think"})"));
  EXPECT_EQ(events[6]["delta"]["type"], "text_delta");
  EXPECT_EQ(events[9]["index"], 2);
  EXPECT_EQ(events[9]["content_block"]["type"], "tool_use");
  EXPECT_EQ(events[9]["content_block"]["id"], "toolu_ABCDEFGHIJKLMNOPQRSTUVWX");
  EXPECT_EQ(events[9]["content_block"]["input"], nlohmann::json::object());
  EXPECT_EQ(events[10]["delta"]["partial_json"], R"({"city":"Paris"})");
  EXPECT_EQ(events[12]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(events[12]["usage"]["output_tokens"], 7);
}

// A call streamed in pieces: its first piece starts the block, later pieces are fragments.
std::vector<ToolCall> call_pieces(int32_t index, const std::vector<std::string>& fragments) {
  std::vector<ToolCall> out;
  for (size_t i = 0; i < fragments.size(); ++i) {
    ToolCall piece = i == 0 ? call(index, fragments[0]) : ToolCall{index, "", "", fragments[i], false, false};
    piece.starts = i == 0;
    piece.ends = i + 1 == fragments.size();
    out.push_back(std::move(piece));
  }
  return out;
}

TEST(AnthropicWire, ToolUseInputStreamsAsInputJsonDeltas) {
  AnthropicWire wire("msg_1", "m");
  Usage usage;
  const std::vector<ToolCall> pieces = call_pieces(0, {"{", R"("city":"Pa)", R"(ris"})"});
  std::string sse = wire.stream_start(usage);
  sse += wire.stream_delta(delta("", "", {pieces[0]}), usage);
  sse += wire.stream_delta(delta("", "", {pieces[1]}), usage);
  sse += wire.stream_delta(delta("", "", {pieces[2]}), usage);
  sse += wire.stream_delta(delta("", "after"), usage);
  StepOutput end;
  end.finish_reason = "tool_calls";
  sse += wire.stream_finish(end, usage);
  const auto events = parse_events(sse);
  EXPECT_EQ(types(events), (std::vector<std::string>{
                               "message_start", "ping", "content_block_start", "content_block_delta",
                               "content_block_delta", "content_block_delta", "content_block_stop",
                               "content_block_start", "content_block_delta", "content_block_stop",
                               "message_delta", "message_stop"}));
  std::string json;
  for (size_t i = 3; i <= 5; ++i) {
    EXPECT_EQ(events[i]["delta"]["type"], "input_json_delta");
    json += events[i]["delta"]["partial_json"].get<std::string>();
  }
  EXPECT_EQ(json, R"({"city":"Paris"})");
  EXPECT_EQ(events[7]["content_block"]["type"], "text");
  EXPECT_EQ(events[7]["index"], 1);
}

TEST(AnthropicWire, BodyAndStopReasons) {
  AnthropicWire wire("msg_1", "m");
  Usage usage;
  StepOutput end;
  end.finish_reason = "stop";
  end.stop_string = "END";
  const auto body = nlohmann::json::parse(wire.body(delta("r", "text"), end, usage));
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "END");
  ASSERT_EQ(body["content"].size(), 2u);
  EXPECT_EQ(body["content"][0]["type"], "thinking");
  EXPECT_EQ(body["content"][1], nlohmann::json::parse(R"({"type":"text","text":"text"})"));
  StepOutput plain;
  plain.finish_reason = "stop";
  EXPECT_STREQ(AnthropicWire::stop_reason(plain), "end_turn");
  plain.finish_reason = "length";
  EXPECT_STREQ(AnthropicWire::stop_reason(plain), "max_tokens");
  ApiError error = invalid_value("x", "bad");
  EXPECT_EQ(anthropic_error_json(error)["error"]["type"], "invalid_request_error");
  error.status = 503;
  EXPECT_EQ(anthropic_error_json(error)["error"]["type"], "overloaded_error");
  EXPECT_EQ(parse_events(wire.stream_error(error))[0]["type"], "error");
}

ResponsesWire::Setup responses_setup(ResponseStore* store) {
  ResponsesWire::Setup s;
  s.id = "resp_1";
  s.model = "m";
  s.echo = {{"instructions", nullptr}, {"tools", nlohmann::json::array()}};
  s.history = RequestJson::array({RequestJson{{"role", "user"}, {"content", "q"}}});
  s.input_items = nlohmann::json::array({{{"id", "msg_in"}, {"type", "message"}}});
  s.store = store;
  return s;
}

TEST(ResponsesWire, FunctionCallArgumentsStreamAsDeltasThenDone) {
  ResponsesWire wire(responses_setup(nullptr));
  Usage usage;
  const std::vector<ToolCall> pieces = call_pieces(0, {"{", R"("city":)", R"("Oslo"})"});
  std::string sse = wire.stream_start(usage);
  for (const ToolCall& piece : pieces) sse += wire.stream_delta(delta("", "", {piece}), usage);
  StepOutput end;
  end.finish_reason = "tool_calls";
  sse += wire.stream_finish(end, usage);
  const auto events = parse_events(sse);
  EXPECT_EQ(types(events), (std::vector<std::string>{
                               "response.created", "response.in_progress", "response.output_item.added",
                               "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                               "response.function_call_arguments.delta", "response.function_call_arguments.done",
                               "response.output_item.done", "response.completed"}));
  EXPECT_EQ(events[3]["delta"], "{");
  EXPECT_EQ(events[5]["delta"], R"("Oslo"})");
  EXPECT_EQ(events[6]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(events[7]["item"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(events.back()["response"]["output"][0]["arguments"], R"({"city":"Oslo"})");
}

TEST(ResponsesWire, StreamEventSequenceAndStore) {
  ResponseStore store(4, 60, 1 << 20);
  ResponsesWire wire(responses_setup(&store));
  Usage usage;
  usage.num_prompt_tokens = 5;
  std::string sse = wire.stream_start(usage);
  sse += wire.stream_delta(delta("r", "a"), usage);
  sse += wire.stream_delta(delta("", "b", {call(0, R"({"city":"Paris"})")}), usage);
  usage.num_completion_tokens = 3;
  usage.num_reasoning_tokens = 1;
  StepOutput end;
  end.finish_reason = "tool_calls";
  sse += wire.stream_finish(end, usage);
  const auto events = parse_events(sse);
  EXPECT_EQ(types(events), (std::vector<std::string>{
                               "response.created", "response.in_progress",
                               "response.output_item.added", "response.content_part.added",
                               "response.reasoning_text.delta", "response.reasoning_text.done",
                               "response.content_part.done", "response.output_item.done",
                               "response.output_item.added", "response.content_part.added",
                               "response.output_text.delta", "response.output_text.delta",
                               "response.output_text.done", "response.content_part.done",
                               "response.output_item.done",
                               "response.output_item.added", "response.function_call_arguments.delta",
                               "response.function_call_arguments.done", "response.output_item.done",
                               "response.completed"}));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["sequence_number"], i);
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(events[3]["part"]["type"], "reasoning_text");  // the part the deltas fill
  EXPECT_EQ(events[6]["part"]["text"], "r");
  EXPECT_EQ(events[12]["text"], "ab");
  EXPECT_EQ(events[15]["item"]["type"], "function_call");
  EXPECT_EQ(events[15]["item"]["arguments"], "");
  const nlohmann::json& done = events.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][2]["id"], events[15]["item"]["id"]);  // ids stay the same
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
  EXPECT_EQ(done["usage"]["total_tokens"], 8);
  const std::optional<RequestJson> stored = store.get("resp_1");
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->size(), 2u);
  EXPECT_EQ((*stored)[1]["content"], "ab");
  EXPECT_EQ((*stored)[1]["reasoning_content"], "r");
  EXPECT_EQ((*stored)[1]["tool_calls"][0]["id"], "call_ABCDEFGHIJKLMNOPQRSTUVWX");
  // What GET /v1/responses/{id} returns: the object response.completed carried.
  const std::optional<ResponseStore::Stored> whole = store.find("resp_1");
  ASSERT_TRUE(whole);
  EXPECT_EQ(nlohmann::json::parse(whole->response_json), done);
  EXPECT_EQ(whole->input_items[0]["id"], "msg_in");
}

TEST(ResponsesWire, BodyIsStoredAsReturned) {
  ResponseStore store(4, 60, 1 << 20);
  ResponsesWire wire(responses_setup(&store));
  Usage usage;
  StepOutput end;
  end.finish_reason = "stop";
  const std::string body = wire.body(delta("", "abc"), end, usage);
  const std::optional<ResponseStore::Stored> whole = store.find("resp_1");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->response_json, body);
}

TEST(ResponsesWire, IncompleteBodyAndNoStore) {
  ResponsesWire wire(responses_setup(nullptr));
  Usage usage;
  StepOutput end;
  end.finish_reason = "length";
  const auto body = nlohmann::json::parse(wire.body(delta("", "abc"), end, usage));
  EXPECT_EQ(body["status"], "incomplete");
  EXPECT_EQ(body["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "abc");
  EXPECT_EQ(body["output"][0]["status"], "incomplete");  // the item the limit cut
  EXPECT_EQ(body["usage"]["input_tokens_details"]["cached_tokens"], 0);
}

// A Responses stream's output_item.done statuses in order, and its response.incomplete's response.
std::pair<std::vector<std::string>, nlohmann::json> item_statuses(const std::string& sse) {
  std::vector<std::string> done_status;
  nlohmann::json final_response;
  for (const nlohmann::json& e : parse_events(sse)) {
    if (e["type"] == "response.output_item.done") done_status.push_back(e["item"]["status"]);
    if (e["type"] == "response.incomplete") final_response = e["response"];
  }
  return {std::move(done_status), std::move(final_response)};
}

// A stream cut by max_output_tokens: the items closed before the cut are completed, the one
// open at the cut is incomplete, in its output_item.done and in the final response.
TEST(ResponsesWire, StreamCutMarksTheOpenItemIncomplete) {
  ResponsesWire wire(responses_setup(nullptr));
  Usage usage;
  std::string sse = wire.stream_start(usage);
  sse += wire.stream_delta(delta("r", "a"), usage);
  StepOutput end;
  end.finish_reason = "length";
  sse += wire.stream_finish(end, usage);
  const auto [done_status, final_response] = item_statuses(sse);
  EXPECT_EQ(done_status, (std::vector<std::string>{"completed", "incomplete"}));
  ASSERT_TRUE(final_response.is_object());
  EXPECT_EQ(final_response["output"][0]["status"], "completed");
  EXPECT_EQ(final_response["output"][1]["status"], "incomplete");
}

// A tool call cut by the token limit is closed by the ending step's own delta (the parser's
// finish): its output_item.done says incomplete, as the final response does.
TEST(ResponsesWire, CallClosedByTheEndingStepIsIncomplete) {
  ResponsesWire wire(responses_setup(nullptr));
  Usage usage;
  const std::vector<ToolCall> pieces = call_pieces(0, {"{", "}"});
  std::string sse = wire.stream_start(usage);
  sse += wire.stream_delta(delta("", "", {pieces[0]}), usage);
  StepOutput end;
  end.finish_reason = "length";
  wire.stream_ending(end);
  sse += wire.stream_delta(delta("", "", {pieces[1]}), usage);
  sse += wire.stream_finish(end, usage);
  const auto [done_status, final_response] = item_statuses(sse);
  EXPECT_EQ(done_status, (std::vector<std::string>{"incomplete"}));
  ASSERT_TRUE(final_response.is_object());
  EXPECT_EQ(final_response["output"][0]["status"], "incomplete");
}

// A non-streamed body keeps the model's order of text and tool calls, as the stream does: the
// gathered deltas' blocks, not the merged output's (all text first).
TEST(AgentWires, GatheredBodiesKeepTheDeltasOrder) {
  Usage usage;
  StepOutput end;
  end.finish_reason = "tool_calls";
  const std::vector<OutputDelta> deltas = {delta("", "before "), delta("", "", {call(0, R"({"city":"Paris"})")}),
                                           delta("", "after")};
  OutputDelta all;
  for (const OutputDelta& d : deltas) {
    all.content += d.content;
    all.tool_calls.insert(all.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  }
  AnthropicWire anthropic("msg_1", "m");
  for (const OutputDelta& d : deltas) anthropic.gather(d);
  const auto message = nlohmann::json::parse(anthropic.body(all, end, usage));
  ASSERT_EQ(message["content"].size(), 3u);
  EXPECT_EQ(message["content"][0]["text"], "before ");
  EXPECT_EQ(message["content"][1]["type"], "tool_use");
  EXPECT_EQ(message["content"][2]["text"], "after");
  ResponsesWire responses(responses_setup(nullptr));
  for (const OutputDelta& d : deltas) responses.gather(d);
  const auto response = nlohmann::json::parse(responses.body(all, end, usage));
  ASSERT_EQ(response["output"].size(), 3u);
  EXPECT_EQ(response["output"][0]["type"], "message");
  EXPECT_EQ(response["output"][1]["type"], "function_call");
  EXPECT_EQ(response["output"][2]["content"][0]["text"], "after");
}

}  // namespace
}  // namespace deltaserve::server
