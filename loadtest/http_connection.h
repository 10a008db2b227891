// One client connection to the daemon, driven by C++20 coroutines on the tool's single I/O
// thread. Every operation takes an absolute deadline, so nothing the server does (or fails
// to do) can hang the tool: a missed deadline closes the socket and the operation returns
// beast::error::timeout. Errors come back as error codes, never as exceptions.
//
// Threading: all members run on the io_context's one thread (no locking anywhere).
// Accounting: every connection counts itself in ConnectionCounters while its socket is
// open, so the tool can report how many connections it opened and whether all were closed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace deltaserve::loadtest {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;

// Where the daemon listens: only plain http:// URLs (the tool talks to loopback or a LAN).
struct ServerUrl {
  std::string host;
  std::string port;
  std::string base_path;  // "" or "/prefix" without the trailing slash
};

// Parses "http://host:port[/prefix]"; nullopt (and `error` filled) on anything else.
std::optional<ServerUrl> parse_server_url(const std::string& url, std::string& error);

struct ConnectionCounters {
  int64_t num_opened = 0;
  int64_t num_closed = 0;
  int64_t num_open() const { return num_opened - num_closed; }
};

// Result of a partial body read.
struct BodyRead {
  beast::error_code ec;
  bool done = false;  // the response body is complete
};

class HttpConnection {
 public:
  // `max_buffer_bytes` bounds what is read ahead of the parser (a slow reader keeps it small
  // so the kernel's receive window, not this buffer, absorbs the server's writes).
  HttpConnection(net::any_io_executor executor, ConnectionCounters& counters,
                 size_t max_buffer_bytes = 64 * 1024);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  net::awaitable<beast::error_code> connect(const ServerUrl& url, Clock::time_point deadline);
  bool is_open() const { return open_; }
  // Abrupt close (the server sees EOF or a reset): used for client disconnects and on errors.
  void close();
  // A small kernel receive buffer, set before connect() to make a slow reader felt at once.
  void set_receive_buffer_bytes(int bytes) { receive_buffer_bytes_ = bytes; }

  // On an error the socket stays open: the server may have answered before reading it all.
  net::awaitable<beast::error_code> write(std::string_view bytes, Clock::time_point deadline);

  // Starts reading a response: its status line and headers.
  net::awaitable<beast::error_code> read_header(Clock::time_point deadline);
  unsigned status() const { return parser_->get().result_int(); }
  bool keep_alive() const { return parser_->get().keep_alive(); }
  std::string header_value(http::field field) const;

  // Appends at most `max_bytes` of de-chunked body to `out`; done once the body is complete.
  net::awaitable<BodyRead> read_body_some(std::string& out, size_t max_bytes,
                                          Clock::time_point deadline);
  // Reads the whole remaining body (at most `limit_bytes`, else an error).
  net::awaitable<beast::error_code> read_body_all(std::string& out, size_t limit_bytes,
                                                  Clock::time_point deadline);
  // Whether the previous response was read completely, so the connection can carry another.
  bool reusable() const { return open_ && parser_ && parser_->is_done() && parser_->get().keep_alive(); }

 private:
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  ConnectionCounters& counters_;
  int receive_buffer_bytes_ = 0;  // 0: the system default
  bool open_ = false;
};

// Builds the text of a request with the headers every call carries.
std::string build_request(std::string_view method, std::string_view target, std::string_view host,
                          std::string_view body, std::string_view api_key, bool keep_alive);

}  // namespace deltaserve::loadtest
