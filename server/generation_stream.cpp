#include "server/generation_stream.h"

#include <cstdio>
#include <sstream>
#include <string_view>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "server/http_session.h"
#include "server/router.h"

namespace deltaserve::server {
namespace {

// How a response that finished with `finish_reason` ended for its client.
ResponseEnd end_of(std::string_view finish_reason) {
  return finish_reason == "length" ? ResponseEnd::Length : ResponseEnd::Stop;
}

}  // namespace

GenerationStream::GenerationStream(std::shared_ptr<HttpSession> session, GenerationJob job,
                                   ServerState& state, const ModelService& service,
                                   unsigned http_version, bool keep_alive)
    : session_(std::move(session)),
      job_(std::move(job)),
      state_(state),
      service_(service),
      http_version_(http_version),
      keep_alive_(keep_alive && http_version >= 11),
      chunked_(http_version >= 11),
      generation_(*service.codec, job_.setup),
      wire_(job_.wire ? job_.wire
                      : std::make_shared<OpenAiWire>(job_.format, *service.codec,
                                                     job_.include_usage, job_.continuous_usage)),
      keepalive_timer_(session_->executor()) {
  if (job_.stream && state.config().sse_keepalive_s > 0.0) {
    keepalive_interval_ = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(state.config().sse_keepalive_s));
  }
}

GenerationStream::~GenerationStream() {
  if (counted_) state_.generation_ended();
}

std::optional<ApiError> GenerationStream::start() {
  // The sink runs on the engine thread: it only copies the event onto the strand.
  auto self = shared_from_this();
  auto executor = session_->executor();
  scheduler::EventSink sink = [self, executor](const scheduler::RequestEvent& event) {
    boost::asio::post(executor, [self, event] { self->on_event(event); });
  };
  const scheduler::SubmitResult result = service_.engine->submit(job_.spec, std::move(sink));
  if (result.status != scheduler::SubmitStatus::Accepted) {
    ApiError error = submit_error(result, state_);
    if (result.status == scheduler::SubmitStatus::TooLong) {
      error.param = job_.format.endpoint == Endpoint::Chat ? "messages" : "prompt";
    }
    return error;
  }
  id_ = result.id;
  state_.generation_started();
  counted_ = true;
  spdlog::debug("[{}] accepted as engine request {} ({} prompt tokens, max_tokens {})",
                job_.spec.external_id, id_, job_.spec.prompt_tokens.size(), job_.spec.max_tokens);
  if (job_.stream) {
    http::response<http::empty_body> head{http::status::ok, http_version_};
    head.set(http::field::server, "deltaserve");
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    add_cors_headers(head, state_);
    head.set("X-Request-Id", job_.spec.external_id);
    head.keep_alive(keep_alive_);
    if (chunked_) head.chunked(true);
    std::ostringstream out;
    out << head.base();
    session_->write_stream(std::move(out).str());
    write_chunk(wire_->stream_start(generation_.usage()));
    last_write_time_ = std::chrono::steady_clock::now();
    if (keepalive_interval_.count() > 0) keepalive_arm(keepalive_interval_);
  }
  return std::nullopt;
}

void GenerationStream::keepalive_arm(std::chrono::steady_clock::duration wait) {
  keepalive_timer_.expires_after(wait);
  // A weak reference: a pending wait must not keep an ended stream (and its session) alive.
  keepalive_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    if (auto self = weak.lock()) self->on_keepalive(ec);
  });
}

void GenerationStream::on_keepalive(boost::system::error_code ec) {
  if (ec || ended_) return;  // cancelled: the stream ended
  const auto now = std::chrono::steady_clock::now();
  const auto due = last_write_time_ + keepalive_interval_;
  if (now >= due) {
    write_chunk(std::string(kSseKeepAlive));  // updates last_write_time_
    keepalive_arm(keepalive_interval_);
  } else {
    keepalive_arm(due - now);  // a chunk went out meanwhile
  }
}

void GenerationStream::write_chunk(const std::string& data) {
  if (data.empty()) return;
  last_write_time_ = std::chrono::steady_clock::now();
  if (!chunked_) {
    session_->write_stream(data);
    return;
  }
  char size_line[24];
  std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
  std::string chunk = size_line;
  chunk += data;
  chunk += "\r\n";
  session_->write_stream(std::move(chunk));
}

void GenerationStream::on_event(const scheduler::RequestEvent& event) {
  if (ended_) return;  // e.g. the Cancelled that follows our own cancel
  const StepOutput out = generation_.on_event(event);
  if (out.cancel_engine) service_.engine->cancel(id_);
  if (job_.stream) {
    if (out.finish_reason) wire_->stream_ending(out);
    write_stream_output(out);
    if (out.done()) finish_stream(out);
  } else {
    gather(out.delta);
    for (const OutputDelta& d : out.more) gather(d);
    if (out.done()) finish_body(out);
  }
}

void GenerationStream::gather(const OutputDelta& d) {
  wire_->gather(d);
  gathered_.reasoning += d.reasoning;
  gathered_.content += d.content;
  gathered_.logprobs.insert(gathered_.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  gathered_.token_ids.insert(gathered_.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
  for (const ToolCall& piece : d.tool_calls) append_call_piece(gathered_.tool_calls, piece);
}

void GenerationStream::write_stream_output(const StepOutput& out) {
  if (!out.delta.empty()) write_chunk(wire_->stream_delta(out.delta, generation_.usage()));
  for (const OutputDelta& d : out.more) {
    if (!d.empty()) write_chunk(wire_->stream_delta(d, generation_.usage()));
  }
}

ApiError GenerationStream::failure_error(const std::string& message) const {
  if (state_.phase() == ServerPhase::Draining) {
    return not_ready("server_shutdown", "The server shut down before the request finished.", 0);
  }
  return internal_error(message);
}

void GenerationStream::finish_stream(const StepOutput& out) {
  if (out.finish_reason) {
    count_end(end_of(out.finish_reason));
    write_chunk(wire_->stream_finish(out, generation_.usage()));
  } else {
    const ApiError error = failure_error(*out.error);
    spdlog::error("[{}] stream ended with an error: {}", job_.spec.external_id, *out.error);
    state_.metrics().on_error(error.metric_label());
    count_end(ResponseEnd::Error);
    write_chunk(wire_->stream_error(error));
  }
  close_response();
}

void GenerationStream::finish_body(const StepOutput& out) {
  HttpRequest request_shape{http::verb::post, "/", http_version_};
  request_shape.keep_alive(keep_alive_);
  std::ostringstream text;
  if (out.finish_reason) {
    count_end(end_of(out.finish_reason));
    text << json_response(http::status::ok, wire_->body(gathered_, out, generation_.usage()),
                          request_shape, state_);
  } else {
    spdlog::error("[{}] request failed: {}", job_.spec.external_id, *out.error);
    count_end(ResponseEnd::Error);
    const ApiError error = failure_error(*out.error);
    HttpResponse response = error_response(error, &request_shape, state_);
    response.body() = wire_->error_body(error);
    response.prepare_payload();
    text << response;
  }
  session_->write_stream(std::move(text).str(), /*bounded=*/false);
  close_response();
}

// Counted before the response's last bytes go out: the socket write may happen at once, and a
// client that has read the whole response must find it in /metrics (counted after the write, the
// e2e load test's scrape right after its last response saw one 'stop' fewer than it completed).
void GenerationStream::count_end(ResponseEnd how) {
  ended_ = true;
  keepalive_timer_.cancel();
  state_.metrics().on_response_finished(how);
}

void GenerationStream::close_response() {
  if (job_.stream && chunked_) session_->write_stream("0\r\n\r\n");
  session_->end_response(keep_alive_);
}

void GenerationStream::client_gone() {
  if (ended_) return;
  ended_ = true;
  keepalive_timer_.cancel();
  spdlog::debug("[{}] client gone: cancelling engine request {}", job_.spec.external_id, id_);
  service_.engine->cancel(id_);
  state_.metrics().on_response_finished(ResponseEnd::Abort);
}

}  // namespace deltaserve::server
