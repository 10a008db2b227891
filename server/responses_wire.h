// OpenAI Responses API output for /v1/responses, from the same generation output the chat
// API gets. The body is a `response` object whose `output` holds, in order, a `reasoning`
// item (the think text as reasoning_text content), a `message` item (output_text) and one
// `function_call` item per parsed call. A stream is the Responses event sequence, every event
// with `event: <type>` and a sequence_number:
//   response.created, response.in_progress,
//   per item: response.output_item.added,
//     reasoning:     response.reasoning_text.delta*, response.reasoning_text.done
//     message:       response.content_part.added, response.output_text.delta*,
//                    response.output_text.done, response.content_part.done
//     function_call: response.function_call_arguments.delta, ...arguments.done
//   response.output_item.done; then response.completed (or response.incomplete when
//   max_output_tokens cut it), or an `error` event on a failure mid-stream.
// At the end the response is stored (unless store is false): its conversation for
// previous_response_id, its object for GET /v1/responses/{id}, its input items.
// One per request, used from its session's strand only.
#pragma once

#include <string>
#include <vector>

#include "server/output_blocks.h"
#include "server/responses_store.h"
#include "server/wire_format.h"

namespace deltaserve::server {

class ResponsesWire final : public WireFormat {
 public:
  struct Setup {
    std::string id;  // resp_...
    int64_t created_at = 0;
    std::string model;
    nlohmann::json echo;          // ResponsesRequest::echo
    RequestJson history;          // the conversation this response continues
    nlohmann::json input_items;   // the items it runs on, with ids (GET .../input_items)
    ResponseStore* store = nullptr;  // null: not stored
  };

  explicit ResponsesWire(Setup setup) : s_(std::move(setup)) {}

  std::string stream_start(const Usage& usage) override;
  std::string stream_delta(const OutputDelta& delta, const Usage& usage) override;
  std::string stream_finish(const StepOutput& end, const Usage& usage) override;
  void stream_ending(const StepOutput& end) override;
  std::string stream_error(const ApiError& error) override;
  std::string body(const OutputDelta& all, const StepOutput& end, const Usage& usage) override;
  void gather(const OutputDelta& delta) override;

  // The response object; `end` null while it is in progress.
  nlohmann::json response_json(const std::vector<OutputBlock>& blocks, const StepOutput* end,
                               const Usage* usage);

 private:
  std::string event(nlohmann::json value);
  std::string events(const std::vector<BlockEvent>& events);
  const std::string& item_id(size_t index, BlockKind kind);
  // Keeps the finished response (`response`: its object) in the store, if any.
  void store(const std::vector<OutputBlock>& blocks, const nlohmann::json& response);

  Setup s_;
  OutputBlocks blocks_;
  std::vector<std::string> item_ids_;  // per block: rs_ / msg_ / fc_ ids
  int64_t sequence_number_ = 0;
  const char* closing_status_ = "completed";  // output_item.done's status: "incomplete" once a limit cut
};

}  // namespace deltaserve::server
