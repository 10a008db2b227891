// A fixed pool of worker threads implementing kernels::ParallelFor for the CPU backend.
// Owned by one backend and called from its engine thread only (run() is serialised by a
// mutex so a second caller waits instead of corrupting the job). The calling thread works
// too, so a pool of N threads starts N - 1 workers. A run() from inside a job of any pool
// (a nested parallel loop) runs inline on its thread instead of waiting for busy workers.
// An exception thrown by fn on any thread is rethrown by run() once every chunk has ended
// (the first one caught; a throwing chunk stops there, the other chunks run on).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/parallel.h"

namespace deltaserve::runtime {

class ThreadPool final : public kernels::ParallelFor {
 public:
  // num_threads <= 0 takes std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override;

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int64_t num_chunks = 0;
    std::atomic<int64_t> next_chunk{0};
    std::atomic<int64_t> num_done{0};
    std::exception_ptr error;  // the first chunk's exception (under mutex_)
  };

  void worker_loop();
  // Takes chunks of job until none is left; the one that finishes the last chunk wakes run().
  void work_on(Job& job) const;

  std::vector<std::thread> workers_;
  mutable std::mutex run_mutex_;  // one job at a time
  mutable std::mutex mutex_;
  mutable std::condition_variable job_ready_;
  mutable std::condition_variable job_done_;
  // Each run() publishes a fresh Job; a worker still holding an old one finds no chunks left.
  mutable std::shared_ptr<Job> job_;
  mutable uint64_t generation_ = 0;
  mutable bool stopping_ = false;
};

}  // namespace deltaserve::runtime
