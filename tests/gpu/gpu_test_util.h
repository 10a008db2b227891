// Shared helpers of the GPU parity tests (gpu_kernel_tests): device buffers, fresh random
// inputs, error measures against the CPU references, and the result table.
//
// Every GPU output buffer is poisoned (all bytes 0xFF: a NaN in f32, -1 in int32) before a
// run, so an element the kernel failed to write shows up as NaN / mismatch.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/quant.h"

namespace deltaserve::kernels::gputest {

#define CHECK_GPU(call) DS_GPU_CHECK(call, "%s", __func__)

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) CHECK_GPU(gpuMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr, o.n_ = 0; }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)gpuFree(ptr_);
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    if (!host.empty()) CHECK_GPU(gpuMemcpy(ptr_, host.data(), host.size() * sizeof(T), gpuMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) CHECK_GPU(gpuMemcpy(host.data(), ptr_, n_ * sizeof(T), gpuMemcpyDeviceToHost));
    return host;
  }
  void poison() {
    if (n_ > 0) CHECK_GPU(gpuMemset(ptr_, 0xFF, n_ * sizeof(T)));
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct ErrorStats {
  double nmse = 0.0;     // sum (a - b)^2 / sum b^2
  double max_abs = 0.0;  // max |a - b|
  bool all_finite = true;
};

// A random weight matrix in `type`: num_out rows quantised from N(0, 1) floats.
inline std::vector<uint8_t> random_weights(std::mt19937& rng, DType type, int64_t num_in, int64_t num_out) {
  const size_t row_bytes = dtype_row_bytes(type, num_in);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(num_out));
  for (int64_t o = 0; o < num_out; ++o) {
    const std::vector<float> row = random_floats(rng, static_cast<size_t>(num_in));
    quantize_row(type, row.data(), w.data() + static_cast<size_t>(o) * row_bytes, num_in);
  }
  return w;
}

inline ErrorStats compare(const float* gpu, const float* ref, size_t n) {
  ErrorStats s;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(gpu[i])) s.all_finite = false;
    const double d = static_cast<double>(gpu[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    s.max_abs = std::max(s.max_abs, std::abs(d));
  }
  s.nmse = den > 0.0 ? num / den : num;
  return s;
}

inline bool bitwise_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// bf16 pools: values to bf16 bits (nearest even, kernels/quant.h) and back.
inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  quantize_row(DType::BF16, v.data(), bits.data(), static_cast<int64_t>(v.size()));
  return bits;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  dequantize_row(DType::BF16, bits.data(), v.data(), static_cast<int64_t>(bits.size()));
  return v;
}

// One line per (kernel, shape) check; main prints the table and the pass/fail count.
struct Results {
  int num_pass = 0;
  int num_fail = 0;
  bool verbose = false;
  void record(const std::string& kernel, const std::string& shape, const ErrorStats& e, double nmse_tol, bool extra_ok = true,
              const char* extra = "") {
    const bool ok = e.all_finite && e.nmse <= nmse_tol && extra_ok;
    (ok ? num_pass : num_fail)++;
    if (verbose || !ok) {
      std::printf("%-4s %-22s %-44s nmse=%.2e max_abs=%.2e %s\n", ok ? "ok" : "FAIL", kernel.c_str(), shape.c_str(), e.nmse,
                  e.max_abs, extra);
    }
    summary_line(kernel, e, ok);
  }
  void record_exact(const std::string& kernel, const std::string& shape, bool ok, const char* what) {
    (ok ? num_pass : num_fail)++;
    if (verbose || !ok) std::printf("%-4s %-22s %-44s %s\n", ok ? "ok" : "FAIL", kernel.c_str(), shape.c_str(), what);
    summary_line(kernel, ErrorStats{}, ok);
  }

  // Per kernel: checks, failures, worst NMSE and max abs error.
  struct Summary {
    std::string kernel;
    int checks = 0, failures = 0;
    double worst_nmse = 0.0, worst_abs = 0.0;
  };
  std::vector<Summary> summaries;
  void summary_line(const std::string& kernel, const ErrorStats& e, bool ok) {
    Summary* s = nullptr;
    for (Summary& x : summaries) {
      if (x.kernel == kernel) s = &x;
    }
    if (s == nullptr) {
      summaries.push_back(Summary{kernel});
      s = &summaries.back();
    }
    s->checks++;
    s->failures += ok ? 0 : 1;
    s->worst_nmse = std::max(s->worst_nmse, e.nmse);
    s->worst_abs = std::max(s->worst_abs, e.max_abs);
  }
};

struct Context {
  std::mt19937 rng{20261130};
  Results results;
  bool quick = false;  // a smaller grid (under compute-sanitizer)
};

void run_matmul_tests(Context& ctx);
void run_matmul_grouped_tests(Context& ctx);
void run_matmul_experts_prefill_tests(Context& ctx);
void run_ops_tests(Context& ctx);
void run_gdn_tests(Context& ctx);
void run_gdn_bf16_tests(Context& ctx);  // called by run_gdn_tests
void run_gdn_prefill_tests(Context& ctx);
void run_attention_tests(Context& ctx);
void run_attention_prep_tests(Context& ctx);
void run_moe_fused_tests(Context& ctx);
void run_moe_down_combine_tests(Context& ctx);
void run_exact_tile_tests(Context& ctx);  // also in matmul_experts_prefill (kTensorExact cases)
void run_draw_tests(Context& ctx);
void run_benchmarks(Context& ctx);
void run_matvec_benchmarks(Context& ctx);
void run_staged_matvec_benchmarks(Context& ctx);
void run_attention_benchmarks(Context& ctx);
void run_prefill_math_benchmarks();  // --bench-prefill

}  // namespace deltaserve::kernels::gputest
