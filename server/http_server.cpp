#include "server/http_server.h"

#include <algorithm>

#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "server/http_session.h"

namespace deltaserve::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr std::chrono::milliseconds kFirstPause{10};
constexpr std::chrono::milliseconds kMaxPause{500};
constexpr std::chrono::seconds kLogInterval{5};

// Failures that mean "no descriptor or memory now": retrying at once cannot succeed.
bool out_of_resources(const boost::system::error_code& ec) {
  return ec == net::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
         ec == net::error::no_buffer_space || ec == net::error::no_memory;
}

}  // namespace

HttpServer::HttpServer(ServerState& state, const std::string& host, uint16_t port)
    : state_(state), acceptor_(net::make_strand(ioc_)), accept_pause_(acceptor_.get_executor()) {
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
      return on_accept_failed(ec);
    }
    pause_ = std::chrono::milliseconds(0);
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks are small and urgent
    std::make_shared<HttpSession>(std::move(socket), state_)->start();
    if (acceptor_.is_open()) do_accept();
  });
}

void HttpServer::on_accept_failed(const boost::system::error_code& ec) {
  const auto now = std::chrono::steady_clock::now();
  const bool resources = out_of_resources(ec);
  ++num_failures_unlogged_;
  if (last_log_ == std::chrono::steady_clock::time_point{} || now - last_log_ >= kLogInterval) {
    // One line per interval; the count covers every failure since the previous line.
    spdlog::warn("accept failed: {} ({} time(s) since the last report){}", ec.message(), num_failures_unlogged_,
                 resources ? "; pausing accepts while open connections keep being served" : "");
    last_log_ = now;
    num_failures_unlogged_ = 0;
  }
  if (!resources) {  // a transient failure of one connection (ECONNABORTED...): go on
    if (acceptor_.is_open()) do_accept();
    return;
  }
  pause_ = pause_.count() == 0 ? kFirstPause : std::min(pause_ * 2, kMaxPause);
  accept_pause_.expires_after(pause_);
  accept_pause_.async_wait([this](boost::system::error_code wait_ec) {
    if (!wait_ec && acceptor_.is_open()) do_accept();
  });
}

void HttpServer::stop_accepting() {
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_pause_.cancel();
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
