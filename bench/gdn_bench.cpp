// The gated delta rule on the CPU, recurrent (gated_delta_rule_ref) against chunked
// (gated_delta_rule_chunked), one sequence's prefill rows from a nonzero state, on one thread
// (serial_for, timed in thread CPU time so other processes on a shared machine do not distort
// it): milliseconds per call and rows per second, at the tiny presets' GDN shapes and the
// 35B-A3B's. Measures; asserts nothing (tests/kernels/gdn_chunked_test.cpp checks the values).
//
//   build/<dir>/bench/gdn_bench [--quick]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/gdn/gated_delta_rule.h"
#include "kernels/parallel.h"

namespace {

using namespace deltaserve::kernels;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Shape {
  const char* name;
  int64_t hk, hv, d;
};

// Best of `repeats` calls of one form, seconds.
double time_form(bool chunked, const Shape& s, int64_t rows, int repeats) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int64_t qk = s.hk * s.d, vs = s.hv * s.d;
  std::vector<float> q(static_cast<size_t>(rows * qk)), k(q.size()), v(static_cast<size_t>(rows * vs)), out(v.size());
  std::vector<float> g(static_cast<size_t>(rows * s.hv)), beta(g.size()), state(static_cast<size_t>(s.hv * s.d * s.d));
  for (float& x : q) x = normal(rng) / static_cast<float>(s.d);
  for (float& x : k) x = normal(rng) / std::sqrt(static_cast<float>(s.d));
  for (float& x : v) x = normal(rng);
  for (float& x : g) x = -unit(rng);
  for (float& x : beta) x = unit(rng);
  for (float& x : state) x = 0.1f * normal(rng);
  GatedDeltaRuleArgs a{q.data(), k.data(), qk, v.data(), vs, g.data(), beta.data(), out.data(), vs, state.data(),
                       rows, s.hk, s.hv, s.d, s.d};
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = thread_seconds();
    if (chunked) gated_delta_rule_chunked(a, serial_for());
    else gated_delta_rule_ref(a, serial_for());
    best = std::min(best, thread_seconds() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const Shape shapes[] = {{"tiny (Hk 2, Hv 4, d 64)", 2, 4, 64}, {"35B-A3B (Hk 16, Hv 32, d 128)", 16, 32, 128}};
  std::printf("%-32s %6s %14s %14s %8s\n", "shape", "rows", "recurrent ms", "chunked ms", "speedup");
  for (const Shape& s : shapes) {
    for (int64_t rows : {64, 512, 2048}) {
      if (quick && rows > 512) continue;
      const int repeats = s.d * s.hv * rows > (int64_t{1} << 20) ? 2 : 5;
      const double rec = time_form(false, s, rows, repeats), chk = time_form(true, s, rows, repeats);
      std::printf("%-32s %6lld %14.3f %14.3f %7.2fx\n", s.name, static_cast<long long>(rows), 1e3 * rec, 1e3 * chk, rec / chk);
    }
  }
  return 0;
}
