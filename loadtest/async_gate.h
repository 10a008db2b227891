// Two small coroutine synchronisation helpers on one steady_timer each, for the tool's one
// I/O thread (no locking): a wait group (wait until every started task is done) and a
// wake-up signal (wait until something changed, then re-check the condition).
#pragma once

#include <cstdint>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace deltaserve::loadtest {

// Waiters sleep on a timer that never expires; notify() cancels it, which wakes them all.
class Signal {
 public:
  explicit Signal(boost::asio::any_io_executor executor)
      : timer_(std::move(executor), boost::asio::steady_timer::time_point::max()) {}

  void notify() { timer_.cancel(); }

  // Returns after the next notify() (or at once if the timer is gone): callers loop on
  // their condition, so a spurious wake-up is harmless.
  boost::asio::awaitable<void> wait() {
    // The expiry stays at max: resetting it would cancel (wake) the other waiters.
    boost::system::error_code ignored;
    co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ignored));
  }

 private:
  boost::asio::steady_timer timer_;
};

class WaitGroup {
 public:
  explicit WaitGroup(boost::asio::any_io_executor executor) : signal_(std::move(executor)) {}

  void add(int64_t n = 1) { count_ += n; }
  void done() {
    if (--count_ <= 0) signal_.notify();
  }
  int64_t count() const { return count_; }

  boost::asio::awaitable<void> wait() {
    while (count_ > 0) co_await signal_.wait();
  }

 private:
  Signal signal_;
  int64_t count_ = 0;
};

}  // namespace deltaserve::loadtest
