// The contract between server/ and the scheduler: a request goes in through submit() with
// a sink; events come back through the sink on the engine thread. The sink must not block
// (it posts to the session's strand). Stop strings and detokenisation are the server's: it
// calls cancel() when a stop string matches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/request_id.h"
#include "runtime/sampling_params.h"

namespace deltaserve::scheduler {

using RequestId = runtime::RequestId;
using TokenLogprob = runtime::OutputLogprob;

struct RequestSpec {
  std::string external_id;                 // "chatcmpl-..." for logs
  std::vector<int32_t> prompt_tokens;
  runtime::SamplingParams sampling;
  int32_t max_tokens = 256;                // generated tokens at most
  std::vector<int32_t> stop_token_ids;     // end with finish_reason stop (EOS included by server);
                                           // the matching id itself is neither sent nor counted
  int32_t draft_depth = -1;                // -1 = server default; 0 = no speculation
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };

// One delivery: zero or more new tokens (several when drafts were accepted), then possibly
// the end. Once finish != None no further event arrives for that request.
struct RequestEvent {
  RequestId id = 0;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // parallel to tokens when logprobs were asked
  FinishReason finish = FinishReason::None;
  std::string error;  // set with FinishReason::Error
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;  // total so far, emitted tokens only
};

using EventSink = std::function<void(const RequestEvent&)>;

enum class SubmitStatus { Accepted, QueueFull, TooLong, NotReady };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::Accepted;
  RequestId id = 0;
  std::string message;  // for the 4xx/5xx body when not accepted
};

// Implemented by the scheduler's engine loop. Both calls are thread-safe and never block on
// a forward pass. A spec the server should have rejected (empty prompt, max_tokens < 1, a
// token id outside the vocabulary) is accepted and ends at once with FinishReason::Error.
class RequestQueue {
 public:
  virtual ~RequestQueue() = default;
  virtual SubmitResult submit(RequestSpec spec, EventSink sink) = 0;
  virtual void cancel(RequestId id) = 0;
};

}  // namespace deltaserve::scheduler
