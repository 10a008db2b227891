// Keep-alive connections shared by the run's requests, as real OpenAI clients keep them.
// A request takes an idle connection (or opens one) and gives it back when the response
// was read to its end and the server kept it alive. The pool also remembers every live
// connection so that the run's deadline can close all of them at once (abort_all), which
// ends every pending operation.
// Threading: the tool's one I/O thread.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "loadtest/http_connection.h"

namespace deltaserve::loadtest {

struct Acquired {
  std::shared_ptr<HttpConnection> connection;  // null when the connect failed
  beast::error_code ec;
  bool reused = false;  // it carried an earlier response (may have been closed since)
};

class ConnectionPool {
 public:
  ConnectionPool(net::any_io_executor executor, ServerUrl url);

  // `fresh`: never an idle one. `receive_buffer_bytes` > 0 (slow readers) implies fresh.
  net::awaitable<Acquired> acquire(bool fresh, Clock::time_point deadline,
                                   int receive_buffer_bytes = 0);
  // Keeps the connection for reuse when its last response was complete and kept alive.
  void release(std::shared_ptr<HttpConnection> connection);
  void close_idle();
  void abort_all();

  const ConnectionCounters& counters() const { return counters_; }
  const ServerUrl& url() const { return url_; }

 private:
  net::any_io_executor executor_;
  ServerUrl url_;
  ConnectionCounters counters_;
  std::vector<std::shared_ptr<HttpConnection>> idle_;
  std::vector<std::weak_ptr<HttpConnection>> live_;
};

}  // namespace deltaserve::loadtest
