// One HTTP/1.1 connection: read a request (header first, so "Expect: 100-continue" and an
// oversized Content-Length are answered before the body is read), route it, write the
// answer, and go on reading while the client keeps the connection alive.
//
// Threading: every member runs on the connection's strand (the tcp_stream's executor);
// engine events reach a running generation through that same strand.
//
// Writes go through one queue with one write in flight. While a generation runs, a read is
// kept pending so a client that goes away is noticed at once (its request is cancelled),
// and the queue is bounded: a client that does not read its stream fast enough is cut
// off (request cancelled) instead of growing the queue without limit.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/json_nesting_scanner.h"
#include "server/router.h"
#include "server/server_state.h"

namespace deltaserve::server {

class GenerationStream;

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket&& socket, ServerState& state);
  void start();

  // --- for GenerationStream, on the strand ---
  boost::asio::any_io_executor executor() { return stream_.get_executor(); }
  // Queues bytes of the response being produced. Returns false once the connection is
  // closed or when, `bounded`, the unsent bytes would pass the stream queue bound (then the
  // session closes and tells the generation that its client is gone).
  bool write_stream(std::string bytes, bool bounded = true);
  // The current response is complete once its queued bytes are out; then the session
  // reads the next request, or closes when `keep_alive` is false.
  void end_response(bool keep_alive);

 private:
  void do_read_header();
  void on_read_header(boost::beast::error_code ec, std::size_t bytes);
  void do_read_body();
  void on_read_body(boost::beast::error_code ec, std::size_t bytes);
  void reject_too_deep();
  void on_read_error(boost::beast::error_code ec);
  // An error answered before the request is whole (413, too deep, malformed), in the format of
  // the route its headers named (Anthropic's on /v1/messages*).
  HttpResponse early_error(const ApiError& error);
  void handle_request();
  void start_generation(GenerationJob job, const HttpRequest& request);
  void send_response(HttpResponse response);

  void enqueue(std::string bytes);
  void do_write();
  void on_write(boost::beast::error_code ec, std::size_t bytes);
  void on_response_written();

  void watch_start();
  void on_watch(boost::beast::error_code ec, std::size_t bytes);
  void client_gone();
  void close_gracefully();
  void do_linger();

  ServerMetrics::ConnectionTicket connection_;  // first member: counts the whole session
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  ServerState& state_;

  std::deque<std::string> queue_;  // bytes to write, front one in flight
  size_t num_queued_bytes_ = 0;
  bool writing_ = false;
  bool end_pending_ = false;        // end_response() called; waiting for the queue
  bool keep_alive_ = false;
  bool watching_ = false;           // the disconnect-watch read is pending
  bool read_after_watch_ = false;   // next request read once the watch read returns
  bool close_after_watch_ = false;  // close gracefully once the watch read returns
  bool closed_ = false;
  std::string_view route_ = "other";  // route_label() of the request being answered
  std::optional<JsonNestingScanner> nesting_;  // POST bodies: nesting bombs stop the read early
  std::shared_ptr<GenerationStream> generation_;
  std::array<char, 4096> linger_buffer_{};
};

}  // namespace deltaserve::server
