// The listener: binds host:port, accepts connections onto their own strands (one
// HttpSession each) and runs the Asio thread pool that serves them.
//
// When accept fails for lack of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM: descriptors or
// memory run out), the listener pauses before the next accept, doubling the pause up to a
// ceiling and resetting it on the first success, and logs one line per interval with the
// number of failures, instead of retrying at once (a busy loop that floods the log while
// the pending connection stays in the backlog). Existing connections are served meanwhile.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <chrono>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "server/server_state.h"

namespace deltaserve::server {

// Accepts connections on host:port and runs the I/O threads. The port is bound in the
// constructor (throws boost::system::system_error when it cannot be).
class HttpServer {
 public:
  HttpServer(ServerState& state, const std::string& host, uint16_t port);
  ~HttpServer();
  uint16_t port() const { return port_; }
  void start(int num_threads);
  void stop_accepting();  // thread-safe
  void stop();            // stops the I/O threads and joins them; thread-safe, idempotent

 private:
  void do_accept();
  void on_accept_failed(const boost::system::error_code& ec);  // on the acceptor's strand

  ServerState& state_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_pause_;  // on the acceptor's strand
  std::chrono::milliseconds pause_{0};      // current back-off; 0 = none
  int64_t num_failures_unlogged_ = 0;       // failures since the last log line
  std::chrono::steady_clock::time_point last_log_{};
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace deltaserve::server
