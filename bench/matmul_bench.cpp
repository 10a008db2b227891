// matmul_ref throughput per weight type: prints GFLOP/s (2 * in * out * rows flops) and GB/s
// (weight bytes + activation and output bytes) for a few shapes and row counts, on one thread
// (serial_for) and on a 2-thread pool. Measures; asserts nothing.
//
// The 1-thread column is timed in thread CPU time, so other processes on a shared machine do
// not distort it; the 2-thread column can only be timed on the wall clock (best of repeats).
//
//   build/<dir>/bench/matmul_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/matmul/matmul.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"
#include "runtime/thread_pool.h"

namespace {

using namespace deltaserve;
using kernels::DType;

struct Shape {
  int64_t num_in;
  int64_t num_out;
};

// Quantised weights for one (type, shape), built once from the same random f32 matrix.
std::vector<uint8_t> make_weights(DType type, const Shape& s, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(s.num_in));
  const size_t row_bytes = kernels::dtype_row_bytes(type, s.num_in);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(s.num_out));
  for (int64_t o = 0; o < s.num_out; ++o) {
    for (float& v : row) v = normal(rng);
    kernels::quantize_row(type, row.data(), w.data() + o * row_bytes, s.num_in);
  }
  return w;
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds per call: repeats until ~budget_s (and at least 3 calls) have run, best of them.
double time_matmul(const kernels::MatmulArgs& args, const kernels::ParallelFor& parallel,
                   double budget_s, double (*clock_s)()) {
  kernels::matmul_ref(args, parallel);  // warm caches / page in
  double best = 1e30, total = 0;
  int calls = 0;
  while (calls < 3 || total < budget_s) {
    const double t0 = clock_s();
    kernels::matmul_ref(args, parallel);
    const double s = clock_s() - t0;
    best = std::min(best, s);
    total += s;
    ++calls;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const double budget_s = quick ? 0.05 : 0.3;
  const Shape shapes[] = {{2048, 2048}, {2048, 8192}};
  const int64_t row_counts[] = {1, 4, 16};
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                         DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  runtime::ThreadPool pool2(2);
  std::mt19937 rng(1234);

  std::printf("%-5s %-11s %4s %7s | %9s %8s | %9s %8s\n", "type", "in x out", "rows", "W MB",
              "1t GFLOP/s", "1t GB/s", "2t GFLOP/s", "2t GB/s");
  for (const Shape& s : shapes) {
    std::vector<float> x(static_cast<size_t>(16 * s.num_in));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(16 * s.num_out));
    for (DType type : types) {
      const std::vector<uint8_t> w = make_weights(type, s, rng);
      for (int64_t rows : row_counts) {
        const kernels::MatmulArgs args{w.data(), type, s.num_in, s.num_out,
                                       kernels::dtype_row_bytes(type, s.num_in), x.data(), rows,
                                       s.num_in, y.data(), s.num_out};
        const double flops = 2.0 * static_cast<double>(s.num_in * s.num_out * rows);
        const double bytes = static_cast<double>(w.size()) +
                             4.0 * static_cast<double>(rows * (s.num_in + s.num_out));
        const double t1 = time_matmul(args, kernels::serial_for(), budget_s, thread_cpu_s);
        const double t2 = time_matmul(args, pool2, budget_s, wall_s);
        std::printf("%-5s %5lldx%-5lld %4lld %7.1f | %9.2f %8.2f | %9.2f %8.2f\n",
                    std::string(kernels::dtype_name(type)).c_str(),
                    static_cast<long long>(s.num_in), static_cast<long long>(s.num_out),
                    static_cast<long long>(rows), static_cast<double>(w.size()) / 1e6,
                    flops / t1 / 1e9, bytes / t1 / 1e9, flops / t2 / 1e9, bytes / t2 / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
