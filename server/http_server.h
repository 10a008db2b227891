// The listener: binds host:port, accepts connections onto their own strands (one
// HttpSession each) and runs the Asio thread pool that serves them.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

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

  ServerState& state_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace deltaserve::server
