#include "kernels/parallel.h"

namespace deltaserve::kernels {
namespace {

class SerialFor final : public ParallelFor {
 public:
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    if (n > 0) fn(0, n);
  }
};

}  // namespace

const ParallelFor& serial_for() {
  static const SerialFor instance;
  return instance;
}

}  // namespace deltaserve::kernels
