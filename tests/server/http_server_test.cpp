// The HTTP server in-process over the fake engine: the open-connection gauge follows the
// sessions whatever closes them (client EOF, a cancelled stream, keep-alive reuse), and SSE
// keep-alive comments fill a stream's silence (a slow first step) only when enabled.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "server/http_server.h"
#include "server/metrics.h"
#include "server/model_loader.h"
#include "server/server_state.h"

namespace deltaserve::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

constexpr const char* kModel = "fake";

// A daemon without main(): fake model, metrics, state and listener on a free port, torn
// down in serve_main's order (drain, stop the I/O threads, engine, listener).
class LiveServer {
 public:
  explicit LiveServer(ServerConfig config)
      : config_(std::move(config)), metrics_({kModel, false, 10.0, {}}), state_(config_, metrics_, kModel) {
    model_ = load_fake_model(config_, &metrics_);
    metrics_.set_limits(model_.limits);
    service_.engine = model_.engine.get();
    service_.codec = model_.codec.get();
    service_.limits = model_.limits;
    state_.publish(&service_);
    http_ = std::make_unique<HttpServer>(state_, "127.0.0.1", 0);
    http_->start(2);
  }

  ~LiveServer() {
    state_.begin_drain();
    model_.engine->begin_drain();
    model_.engine->cancel_all();
    model_.engine->wait_idle(5s);
    http_->stop_accepting();
    http_->stop();
    model_ = LoadedModel();
    http_.reset();
  }

  uint16_t port() const { return http_->port(); }
  ServerMetrics& metrics() { return metrics_; }

  // Polls the gauge until it reads `expected` (sessions end on the I/O threads).
  bool wait_connections(int64_t expected, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (metrics_.num_open_connections() != expected) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

 private:
  ServerConfig config_;
  ServerMetrics metrics_;
  ServerState state_;
  ModelService service_;
  LoadedModel model_;
  std::unique_ptr<HttpServer> http_;
};

ServerConfig fake_config(int32_t step_us, double keepalive_s) {
  ServerConfig c;
  c.fake_engine = true;
  c.fake_step_us = step_us;
  c.sse_keepalive_s = keepalive_s;
  c.http_threads = 2;
  return c;
}

std::string chat_request(int max_tokens, bool stream, bool close) {
  const std::string body = std::string(R"({"model":")") + kModel +
                           R"(","messages":[{"role":"user","content":"hello there"}],"max_tokens":)" +
                           std::to_string(max_tokens) + R"(,"stream":)" + (stream ? "true" : "false") + "}";
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         std::string(close ? "Connection: close\r\n" : "") + "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string get_request(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
}

// A blocking client connection; reads are bounded by a deadline so a hang fails the test.
class Client {
 public:
  explicit Client(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  void send(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }
  // Reads until `needle` is in what was read (or EOF / timeout); returns everything read.
  std::string read_until(const std::string& needle, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (received_.find(needle) == std::string::npos && !eof_ &&
           std::chrono::steady_clock::now() < deadline) {
      char buffer[4096];
      socket_.async_read_some(net::buffer(buffer), [&](boost::system::error_code ec, size_t n) {
        received_.append(buffer, n);
        if (ec) eof_ = true;
      });
      ioc_.restart();
      ioc_.run_for(deadline - std::chrono::steady_clock::now());
      if (!ioc_.stopped()) {  // timed out with the read pending
        socket_.cancel();
        ioc_.restart();
        ioc_.run();
        break;
      }
    }
    return received_;
  }
  std::string read_all(std::chrono::milliseconds timeout = 10s) { return read_until("\x01never\x02", timeout); }
  bool eof() const { return eof_; }
  void close() {
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  std::string received_;
  bool eof_ = false;
};

TEST(HttpServer, OpenConnectionsFollowTheSessions) {
  LiveServer server(fake_config(500, 0.0));
  EXPECT_EQ(server.metrics().num_open_connections(), 0);
  {
    Client a(server.port()), b(server.port()), c(server.port());
    ASSERT_TRUE(server.wait_connections(3));
    a.close();
    b.close();
    ASSERT_TRUE(server.wait_connections(1));
  }
  ASSERT_TRUE(server.wait_connections(0));

  // Keep-alive: two requests on one connection count once.
  {
    Client k(server.port());
    k.send(chat_request(4, false, false));
    ASSERT_NE(k.read_until("\"finish_reason\"").find("200 OK"), std::string::npos);
    EXPECT_EQ(server.metrics().num_open_connections(), 1);
    k.send(get_request("/metrics"));
    const std::string metrics = k.read_all();
    EXPECT_NE(metrics.find("\ndeltaserve_open_connections 1\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("\ndeltaserve_ready 1\n"), std::string::npos);
  }
  ASSERT_TRUE(server.wait_connections(0));

  // A client that leaves in the middle of a stream: its request is cancelled, and its
  // session goes too.
  {
    Client s(server.port());
    s.send(chat_request(2000, true, false));
    ASSERT_NE(s.read_until("\"content\":\"h").find("200 OK"), std::string::npos);
    s.close();
  }
  EXPECT_TRUE(server.wait_connections(0));

  // The server answering Connection: close (a 404) and a malformed request (400).
  {
    Client n(server.port());
    n.send(get_request("/nowhere"));
    EXPECT_NE(n.read_all().find("404"), std::string::npos);
    EXPECT_TRUE(n.eof());
    Client bad(server.port());
    bad.send("BROKEN\r\n\r\n");
    EXPECT_NE(bad.read_all().find("400"), std::string::npos);
  }
  EXPECT_TRUE(server.wait_connections(0));
}

TEST(HttpServer, KeepAliveCommentsWhileAStreamWaits) {
  // 300 ms per fake step: the first token comes long after the role chunk.
  LiveServer server(fake_config(300000, 0.05));
  Client c(server.port());
  c.send(chat_request(2, true, true));
  const std::string text = c.read_all();
  ASSERT_NE(text.find("data: [DONE]"), std::string::npos) << text;
  const size_t role = text.find("\"role\":\"assistant\"");
  const size_t comment = text.find(": keep-alive\n\n", role);
  const size_t first_content = text.find("\"content\":\"h");
  ASSERT_NE(role, std::string::npos);
  ASSERT_NE(comment, std::string::npos) << text;
  EXPECT_LT(comment, first_content);  // sent during the silence before the first token
}

TEST(HttpServer, NoKeepAliveCommentsWhenOff) {
  LiveServer server(fake_config(300000, 0.0));
  Client c(server.port());
  c.send(chat_request(2, true, true));
  const std::string text = c.read_all();
  ASSERT_NE(text.find("data: [DONE]"), std::string::npos) << text;
  EXPECT_EQ(text.find("keep-alive"), std::string::npos) << text;
}

TEST(HttpServer, NoKeepAliveCommentsWithoutStreaming) {
  LiveServer server(fake_config(300000, 0.05));
  Client c(server.port());
  c.send(chat_request(2, false, true));
  const std::string text = c.read_all();
  ASSERT_NE(text.find("\"finish_reason\""), std::string::npos) << text;
  EXPECT_EQ(text.find("keep-alive"), std::string::npos) << text;
}

}  // namespace
}  // namespace deltaserve::server
