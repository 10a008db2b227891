// Kernels never own threads: the caller passes a ParallelFor that splits an index range
// over its workers (the CPU backend's pool) or runs it inline.
#pragma once

#include <cstdint>
#include <functional>

namespace deltaserve::kernels {

class ParallelFor {
 public:
  virtual ~ParallelFor() = default;
  // Calls fn(begin, end) over disjoint ranges covering [0, n); returns when all are done.
  // fn must not depend on how the range is split (results are bit-identical either way).
  virtual void run(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) const = 0;
};

// Runs fn(0, n) on the calling thread.
const ParallelFor& serial_for();

}  // namespace deltaserve::kernels
