#include "loadtest/http_connection.h"

#include <algorithm>
#include <array>

#include <boost/asio/connect.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace deltaserve::loadtest {
namespace {

constexpr size_t kHeaderLimitBytes = 64 * 1024;
constexpr uint64_t kBodyLimitBytes = uint64_t{1} << 30;  // streams can be long; 1 GiB is absurd

auto with_ec(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

}  // namespace

std::optional<ServerUrl> parse_server_url(const std::string& url, std::string& error) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    error = "only http:// URLs are supported, got '" + url + "'";
    return std::nullopt;
  }
  std::string rest = url.substr(kScheme.size());
  ServerUrl out;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    rest.resize(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    error = "the URL needs host:port, got '" + url + "'";
    return std::nullopt;
  }
  out.host = rest.substr(0, colon);
  out.port = rest.substr(colon + 1);
  if (!std::all_of(out.port.begin(), out.port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    error = "the port must be a number, got '" + out.port + "'";
    return std::nullopt;
  }
  return out;
}

HttpConnection::HttpConnection(net::any_io_executor executor, ConnectionCounters& counters,
                               size_t max_buffer_bytes)
    : stream_(std::move(executor)), buffer_(max_buffer_bytes), counters_(counters) {}

HttpConnection::~HttpConnection() { close(); }

net::awaitable<beast::error_code> HttpConnection::connect(const ServerUrl& url,
                                                          Clock::time_point deadline) {
  beast::error_code ec;
  net::ip::tcp::resolver resolver(stream_.get_executor());
  const auto endpoints = co_await resolver.async_resolve(url.host, url.port, with_ec(ec));
  if (ec) co_return ec;
  stream_.expires_at(deadline);
  if (receive_buffer_bytes_ > 0) {
    // The option must be set before the handshake to shrink the advertised window.
    stream_.socket().open(endpoints.begin()->endpoint().protocol(), ec);
    if (ec) co_return ec;
    stream_.socket().set_option(net::socket_base::receive_buffer_size(receive_buffer_bytes_), ec);
    if (ec) co_return ec;
    co_await stream_.async_connect(endpoints.begin()->endpoint(), with_ec(ec));
  } else {
    co_await stream_.async_connect(endpoints, with_ec(ec));
  }
  if (ec) {
    stream_.close();
    co_return ec;
  }
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);
  open_ = true;
  ++counters_.num_opened;
  co_return beast::error_code{};
}

void HttpConnection::close() {
  if (!open_) return;
  open_ = false;
  ++counters_.num_closed;
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
}

net::awaitable<beast::error_code> HttpConnection::write(std::string_view bytes,
                                                        Clock::time_point deadline) {
  beast::error_code ec;
  if (!open_) co_return net::error::not_connected;
  stream_.expires_at(deadline);
  co_await net::async_write(stream_, net::buffer(bytes.data(), bytes.size()), with_ec(ec));
  co_return ec;  // the socket stays open: a response may still be readable (413)
}

net::awaitable<beast::error_code> HttpConnection::read_header(Clock::time_point deadline) {
  beast::error_code ec;
  if (!open_) co_return net::error::not_connected;
  parser_.emplace();
  parser_->header_limit(kHeaderLimitBytes);
  parser_->body_limit(kBodyLimitBytes);
  stream_.expires_at(deadline);
  co_await http::async_read_header(stream_, buffer_, *parser_, with_ec(ec));
  if (ec) close();
  co_return ec;
}

std::string HttpConnection::header_value(http::field field) const {
  const auto& header = parser_->get();
  const auto it = header.find(field);
  return it == header.end() ? std::string() : std::string(it->value());
}

net::awaitable<BodyRead> HttpConnection::read_body_some(std::string& out, size_t max_bytes,
                                                        Clock::time_point deadline) {
  BodyRead result;
  if (parser_->is_done()) {
    result.done = true;
    co_return result;
  }
  if (!open_) {
    result.ec = net::error::not_connected;
    co_return result;
  }
  std::array<char, 16 * 1024> chunk;
  const size_t want = std::min(max_bytes, chunk.size());
  auto& body = parser_->get().body();
  body.data = chunk.data();
  body.size = want;
  stream_.expires_at(deadline);
  co_await http::async_read_some(stream_, buffer_, *parser_, with_ec(result.ec));
  if (result.ec == http::error::need_buffer) result.ec = {};
  out.append(chunk.data(), want - body.size);
  body.data = nullptr;
  body.size = 0;
  if (result.ec) {
    close();
    co_return result;
  }
  result.done = parser_->is_done();
  co_return result;
}

net::awaitable<beast::error_code> HttpConnection::read_body_all(std::string& out, size_t limit_bytes,
                                                                Clock::time_point deadline) {
  while (true) {
    const BodyRead r = co_await read_body_some(out, 16 * 1024, deadline);
    if (r.ec) co_return r.ec;
    if (r.done) co_return beast::error_code{};
    if (out.size() > limit_bytes) {
      close();
      co_return http::error::body_limit;
    }
  }
}

std::string build_request(std::string_view method, std::string_view target, std::string_view host,
                          std::string_view body, std::string_view api_key, bool keep_alive) {
  std::string text;
  text.reserve(256 + body.size());
  text.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  text.append("Host: ").append(host).append("\r\n");
  text.append("User-Agent: deltaserve-load\r\n");
  if (!api_key.empty()) text.append("Authorization: Bearer ").append(api_key).append("\r\n");
  if (!keep_alive) text.append("Connection: close\r\n");
  if (method != "GET" || !body.empty()) {
    text.append("Content-Type: application/json\r\n");
    text.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  text.append("\r\n").append(body);
  return text;
}

}  // namespace deltaserve::loadtest
