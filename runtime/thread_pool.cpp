#include "runtime/thread_pool.h"

#include <algorithm>

namespace deltaserve::runtime {
namespace {

// This thread is running a job's chunks (worker or caller): nested run() calls go inline.
thread_local bool t_in_job = false;

// Sets t_in_job for a scope and restores it.
class InJob {
 public:
  InJob() : before_(t_in_job) { t_in_job = true; }
  ~InJob() { t_in_job = before_; }
  InJob(const InJob&) = delete;
  InJob& operator=(const InJob&) = delete;

 private:
  bool before_;
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work_on(Job& job) const {
  for (;;) {
    const int64_t chunk = job.next_chunk.fetch_add(1);
    if (chunk >= job.num_chunks) return;
    // Chunk c covers [c * n / chunks, (c + 1) * n / chunks): contiguous, disjoint, complete.
    const int64_t begin = chunk * job.n / job.num_chunks, end = (chunk + 1) * job.n / job.num_chunks;
    if (begin < end) {
      const InJob in_job;
      try {
        (*job.fn)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!job.error) job.error = std::current_exception();
      }
    }
    if (job.num_done.fetch_add(1) + 1 == job.num_chunks) {
      std::lock_guard<std::mutex> lock(mutex_);
      job_done_.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      job_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    if (job) work_on(*job);
  }
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const {
  if (n <= 0) return;
  if (workers_.empty() || n == 1 || t_in_job) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  // A few chunks per thread balance uneven work without much scheduling overhead.
  job->num_chunks = std::min<int64_t>(n, static_cast<int64_t>(num_threads()) * 4);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = job;
    ++generation_;
  }
  job_ready_.notify_all();
  work_on(*job);
  std::unique_lock<std::mutex> lock(mutex_);
  job_done_.wait(lock, [&] { return job->num_done.load() == job->num_chunks; });
  job_.reset();
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace deltaserve::runtime
