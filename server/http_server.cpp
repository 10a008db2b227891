#include "server/http_server.h"

#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "server/http_session.h"

namespace deltaserve::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpServer::HttpServer(ServerState& state, const std::string& host, uint16_t port)
    : state_(state), acceptor_(net::make_strand(ioc_)) {
  const tcp::endpoint endpoint{net::ip::make_address(host), port};
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start(int num_threads) {
  do_accept();
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void HttpServer::do_accept() {
  // Each connection gets its own strand: its handlers never run concurrently.
  acceptor_.async_accept(net::make_strand(ioc_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      spdlog::warn("accept failed: {}", ec.message());
    } else {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks are small and urgent
      std::make_shared<HttpSession>(std::move(socket), state_)->start();
    }
    if (acceptor_.is_open()) do_accept();
  });
}

void HttpServer::stop_accepting() {
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
}

void HttpServer::stop() {
  ioc_.stop();
  for (std::thread& t : threads_) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  threads_.clear();
}

}  // namespace deltaserve::server
