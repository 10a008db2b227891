#include "loadtest/connection_pool.h"

#include <algorithm>

namespace deltaserve::loadtest {
namespace {

// A slow reader reads through a small buffer, so the server's writes pile up in the kernel.
constexpr size_t kSlowReaderBufferBytes = 1024;

}  // namespace

ConnectionPool::ConnectionPool(net::any_io_executor executor, ServerUrl url)
    : executor_(std::move(executor)), url_(std::move(url)) {}

net::awaitable<Acquired> ConnectionPool::acquire(bool fresh, Clock::time_point deadline,
                                                 int receive_buffer_bytes) {
  Acquired out;
  if (!fresh && receive_buffer_bytes == 0) {
    while (!idle_.empty()) {
      std::shared_ptr<HttpConnection> c = std::move(idle_.back());
      idle_.pop_back();
      if (c->is_open()) {
        out.connection = std::move(c);
        out.reused = true;
        co_return out;
      }
    }
  }
  const size_t buffer_bytes = receive_buffer_bytes > 0 ? kSlowReaderBufferBytes : 64 * 1024;
  auto c = std::make_shared<HttpConnection>(executor_, counters_, buffer_bytes);
  c->set_receive_buffer_bytes(receive_buffer_bytes);
  live_.erase(std::remove_if(live_.begin(), live_.end(), [](auto& w) { return w.expired(); }),
              live_.end());
  live_.push_back(c);
  out.ec = co_await c->connect(url_, deadline);
  if (!out.ec) out.connection = std::move(c);
  co_return out;
}

void ConnectionPool::release(std::shared_ptr<HttpConnection> connection) {
  if (!connection) return;
  if (connection->reusable()) {
    idle_.push_back(std::move(connection));
  } else {
    connection->close();
  }
}

void ConnectionPool::close_idle() {
  for (auto& c : idle_) c->close();
  idle_.clear();
}

void ConnectionPool::abort_all() {
  close_idle();
  for (auto& w : live_) {
    if (auto c = w.lock()) c->close();
  }
}

}  // namespace deltaserve::loadtest
