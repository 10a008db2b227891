// ThreadPool: every index runs once, an exception from any thread reaches run()'s caller and
// leaves the pool usable, and a run() from inside a job runs inline (no deadlock).
#include "runtime/thread_pool.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace deltaserve::runtime {
namespace {

TEST(ThreadPool, AnExceptionReachesTheCallerAndThePoolStaysUsable) {
  const ThreadPool pool(4);
  std::atomic<int64_t> ran{0};
  EXPECT_THROW(pool.run(64,
                        [&](int64_t begin, int64_t end) {
                          for (int64_t i = begin; i < end; ++i) {
                            if (i == 37) throw std::runtime_error("row 37");
                            ++ran;
                          }
                        }),
               std::runtime_error);
  EXPECT_LT(ran.load(), 64);
  std::vector<int> seen(1000, 0);
  pool.run(1000, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
  });
  EXPECT_EQ(seen, std::vector<int>(1000, 1));
}

TEST(ThreadPool, ANestedRunGoesInline) {
  const ThreadPool pool(4);
  std::vector<int64_t> sums(8, 0);
  pool.run(8, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      pool.run(100, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sums[static_cast<size_t>(k)] += i;
      });
    }
  });
  EXPECT_EQ(sums, std::vector<int64_t>(8, 4950));
}

}  // namespace
}  // namespace deltaserve::runtime
