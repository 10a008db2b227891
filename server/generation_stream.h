// One running generation on a connection: submits the job, receives its engine events on
// the session's strand (the engine thread only posts them), and writes the response, as
// SSE chunks (chunked transfer encoding) or as one JSON body at the end.
//
// The stream grammar is fixed (openai_response.h); in particular a stream always ends
// with either a finish chunk or an error event, then "data: [DONE]", never silently.
// While a stream sends nothing for --sse-keepalive-s (queued, a long prefill), an SSE
// comment ": keep-alive" goes out so proxies do not cut the idle connection; clients
// ignore comments.
//
// Owned by its HttpSession while it runs and by the sink the engine holds until the
// request's final event; every method runs on the session's strand.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include <boost/asio/steady_timer.hpp>

#include "server/api_error.h"
#include "server/generation_job.h"
#include "server/generation_state.h"
#include "server/openai_response.h"
#include "server/server_state.h"

namespace deltaserve::server {

class HttpSession;

class GenerationStream : public std::enable_shared_from_this<GenerationStream> {
 public:
  GenerationStream(std::shared_ptr<HttpSession> session, GenerationJob job, ServerState& state,
                   const ModelService& service, unsigned http_version, bool keep_alive);
  // Counts the generation as ended for the shutdown drain: by now its response is fully
  // written (the session let go of it) or its client is gone, and the engine is done with it.
  ~GenerationStream();

  // Submits to the engine. On refusal returns the error to answer with (nothing written);
  // on acceptance a stream's headers (and role chunk) are queued at once.
  std::optional<ApiError> start();
  void on_event(const scheduler::RequestEvent& event);
  // The client went away (or cannot keep up): cancel the request; nothing more is written.
  void client_gone();

 private:
  void write_stream_output(const StepOutput& out);
  void gather(const OutputDelta& d);  // non-streaming: adds one delta to gathered_
  void finish_stream(const StepOutput& out);
  void finish_body(const StepOutput& out);
  void write_chunk(const std::string& data);
  // Keep-alive: (re)arms the timer for the time left until a comment is due.
  void keepalive_arm(std::chrono::steady_clock::duration wait);
  void on_keepalive(boost::system::error_code ec);
  void count_end(ResponseEnd how);  // marks the stream ended and counts it in the metrics
  void close_response();            // the last chunk (chunked streams) and the session's end
  ApiError failure_error(const std::string& message) const;

  std::shared_ptr<HttpSession> session_;
  GenerationJob job_;
  ServerState& state_;
  const ModelService& service_;
  const unsigned http_version_;
  const bool keep_alive_;
  const bool chunked_;  // HTTP/1.1: chunked transfer encoding; 1.0: raw bytes, then close
  GenerationState generation_;
  std::shared_ptr<WireFormat> wire_;
  OutputDelta gathered_;  // non-streaming: everything so far (tool calls merged whole)
  boost::asio::steady_timer keepalive_timer_;  // on the session's strand
  std::chrono::steady_clock::duration keepalive_interval_{};  // zero = off
  std::chrono::steady_clock::time_point last_write_time_;
  scheduler::RequestId id_ = 0;
  bool ended_ = false;
  bool counted_ = false;  // generation_started() was called
};

}  // namespace deltaserve::server
