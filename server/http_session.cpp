#include "server/http_session.h"

#include <sstream>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "server/agent_routes.h"
#include "server/anthropic_wire.h"
#include "server/generation_stream.h"

namespace deltaserve::server {

namespace beast = boost::beast;
namespace net = boost::asio;

namespace {

constexpr uint32_t kHeaderLimitBytes = 64 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);

std::string serialize(const HttpResponse& response) {
  std::ostringstream out;
  out << response;
  return std::move(out).str();
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket&& socket, ServerState& state)
    : connection_(state.metrics().open_connection()), stream_(std::move(socket)), state_(state) {}

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read_header(); });
}

void HttpSession::do_read_header() {
  if (closed_) return;
  parser_.emplace();
  route_ = "other";
  parser_->body_limit(static_cast<uint64_t>(state_.config().max_body_bytes));
  parser_->header_limit(kHeaderLimitBytes);
  stream_.expires_after(std::chrono::seconds(state_.config().keep_alive_timeout_s));
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&HttpSession::on_read_header, shared_from_this()));
}

void HttpSession::on_read_header(beast::error_code ec, std::size_t) {
  const auto& req = parser_->get();
  // Before the error check: a Content-Length over the limit fails the header read itself, and
  // its 413 is written in the format of the route its request line named (an unread target
  // is empty: "other").
  route_ = route_label(request_path(std::string_view(req.target().data(), req.target().size())));
  if (ec) return on_read_error(ec);
  if (const auto length = parser_->content_length();
      length && *length > static_cast<uint64_t>(state_.config().max_body_bytes)) {
    return on_read_error(http::error::body_limit);
  }
  if (parser_->is_done()) return handle_request();
  nesting_.reset();
  if (req.method() == http::verb::post) nesting_.emplace(state_.config().max_json_depth);
  const auto expect = req.find(http::field::expect);
  if (expect != req.end() && beast::iequals(expect->value(), "100-continue")) {
    enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  do_read_body();
}

// The body is read piece by piece so that a JSON nesting bomb is answered as soon as its
// depth passes the limit, not after megabytes more of it have arrived.
void HttpSession::do_read_body() {
  http::async_read_some(stream_, buffer_, *parser_,
                        beast::bind_front_handler(&HttpSession::on_read_body, shared_from_this()));
}

void HttpSession::on_read_body(beast::error_code ec, std::size_t) {
  if (ec) return on_read_error(ec);
  if (nesting_ && !nesting_->feed(parser_->get().body())) return reject_too_deep();
  if (!parser_->is_done()) return do_read_body();
  handle_request();
}

// 400 and close: the rest of the body is read and dropped by the linger, never stored.
void HttpSession::reject_too_deep() {
  const ApiError error = nesting_->too_deep();
  nesting_.reset();
  send_response(early_error(error));
}

HttpResponse HttpSession::early_error(const ApiError& error) {
  HttpResponse response = error_response(error, nullptr, state_);
  if (is_anthropic_path(route_)) {
    response.body() = json_text(anthropic_error_json(error));
    response.prepare_payload();
  }
  return response;
}

void HttpSession::on_read_error(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    // Answer 413 and close: the rest of the body is never read.
    send_response(early_error(payload_too_large(static_cast<size_t>(state_.config().max_body_bytes))));
    return;
  }
  if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
      ec == net::error::connection_reset || ec == net::error::operation_aborted) {
    close_gracefully();
    return;
  }
  // A malformed request: answer 400 when anything can still be written, then close.
  ApiError e = invalid_value("request", std::string("malformed HTTP request: ") + ec.message());
  e.code = "bad_http_request";
  send_response(early_error(e));
}

void HttpSession::handle_request() {
  HttpRequest request = parser_->release();
  Routed routed;
  try {
    routed = route_request(request, state_);
  } catch (const std::exception& e) {
    spdlog::error("request {} {}: unexpected failure: {}", std::string(request.method_string()),
                  std::string(request.target()), e.what());
    routed.response = error_response(internal_error(std::string("internal error: ") + e.what()),
                                     &request, state_);
  }
  if (routed.generation) {
    start_generation(std::move(*routed.generation), request);
  } else {
    send_response(std::move(*routed.response));
  }
}

void HttpSession::start_generation(GenerationJob job, const HttpRequest& request) {
  const ModelService* service = state_.service();
  auto generation = std::make_shared<GenerationStream>(shared_from_this(), std::move(job), state_,
                                                       *service, request.version(),
                                                       keep_alive_after(request, state_));
  if (std::optional<ApiError> refused = generation->start()) {
    send_response(error_response(*refused, &request, state_));
    return;
  }
  state_.metrics().on_http_response(route_, 200);  // the stream's status, whatever follows
  generation_ = std::move(generation);
  if (buffer_.size() == 0) watch_start();  // else the next request is already here
}

void HttpSession::send_response(HttpResponse response) {
  state_.metrics().on_http_response(route_, static_cast<int>(response.result_int()));
  const bool keep_alive = response.keep_alive();
  enqueue(serialize(response));
  end_response(keep_alive);
}

bool HttpSession::write_stream(std::string bytes, bool bounded) {
  if (closed_) return false;
  if (bounded && num_queued_bytes_ + bytes.size() > static_cast<size_t>(state_.config().stream_queue_bytes)) {
    spdlog::warn("closing a connection whose client does not read its stream ({} bytes unsent)",
                 num_queued_bytes_);
    state_.metrics().on_error("stream_error");
    client_gone();
    return false;
  }
  enqueue(std::move(bytes));
  return true;
}

void HttpSession::end_response(bool keep_alive) {
  keep_alive_ = keep_alive;
  end_pending_ = true;
  if (!writing_ && queue_.empty()) on_response_written();
}

void HttpSession::enqueue(std::string bytes) {
  if (closed_ || bytes.empty()) return;
  num_queued_bytes_ += bytes.size();
  queue_.push_back(std::move(bytes));
  do_write();
}

void HttpSession::do_write() {
  if (writing_ || queue_.empty() || closed_) return;
  writing_ = true;
  net::async_write(stream_, net::buffer(queue_.front()),
                   beast::bind_front_handler(&HttpSession::on_write, shared_from_this()));
}

void HttpSession::on_write(beast::error_code ec, std::size_t) {
  writing_ = false;
  if (ec) {
    client_gone();
    return;
  }
  num_queued_bytes_ -= queue_.front().size();
  queue_.pop_front();
  if (!queue_.empty()) {
    do_write();
  } else if (end_pending_) {
    on_response_written();
  }
}

void HttpSession::on_response_written() {
  end_pending_ = false;
  generation_.reset();
  if (closed_) return;
  if (!keep_alive_ && watching_) {
    // One read at a time: a linger read next to the pending watch read would never see the
    // client's EOF (the watch read takes it) and gets no timeout, leaking the socket.
    close_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
  } else if (!keep_alive_) {
    close_gracefully();
  } else if (watching_) {
    // The watch read is still pending: cancel it; its handler starts the next read.
    read_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
  } else {
    do_read_header();
  }
}

void HttpSession::watch_start() {
  stream_.expires_never();
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(1024),
                          beast::bind_front_handler(&HttpSession::on_watch, shared_from_this()));
}

void HttpSession::on_watch(beast::error_code ec, std::size_t bytes) {
  watching_ = false;
  if (close_after_watch_) return close_gracefully();  // the response is out; nothing else to read
  if (!ec) {
    buffer_.commit(bytes);  // a pipelined request: kept for the next read
  } else if (!(ec == net::error::operation_aborted && read_after_watch_)) {
    client_gone();  // EOF or reset while the response was still being produced
    return;
  }
  if (read_after_watch_) {
    read_after_watch_ = false;
    do_read_header();
  }
}

void HttpSession::client_gone() {
  if (auto generation = std::move(generation_)) generation->client_gone();
  if (closed_) return;
  closed_ = true;  // the queue stays: a write in flight may still read its front buffer
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
}

// Half-close, then read and discard what the client still sends for a moment, so that a
// response written before the request was fully read (413) is not lost to a reset.
void HttpSession::close_gracefully() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  do_linger();
}

void HttpSession::do_linger() {
  stream_.async_read_some(net::buffer(linger_buffer_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec) {
                              self->stream_.close();
                              return;
                            }
                            self->do_linger();
                          });
}

}  // namespace deltaserve::server
