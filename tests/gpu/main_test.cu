// gpu_kernel_tests: every GPU kernel against its CPU reference on fresh random inputs over a
// grid of shapes (odd sizes included), plus batch-invariance checks (a row alone is
// bit-identical to the same row in a batch). Needs a device; exits 0 only if all pass.
//
//   gpu_kernel_tests [--quick] [--verbose] [--bench]
//     --quick    smaller grid (for compute-sanitizer memcheck / racecheck runs)
//     --bench    per-kernel timings at the Qwen3.6-35B-A3B decode shapes instead of checks
//     --bench-matvec  only the matrix-vector timings (quick A/B of a matvec change)
//     --bench-staged  the staged matvec alone on the 27B's one- and two-row shapes and the LM heads
//     --bench-prefill only the tiled prefill products, f32 / TF32 / exact tensor side by side
//     --bench-attention only the attention timings (paged decode at 1-64 streams, head splits; prefill chunks)
//     --only a,b  only the named suites (matmul, matmul_grouped, matmul_experts_prefill, ops,
//                 gdn, gdn_prefill, attention, attention_prep, moe_fused, moe_down_combine,
//                 exact_tile, draw): racecheck runs,
//                 which are slow, take them a few at a time
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/gpu/gpu_test_util.h"

using namespace deltaserve::kernels;
using namespace deltaserve::kernels::gputest;

int main(int argc, char** argv) {
  Context ctx;
  bool bench = false, bench_matvec = false, bench_staged = false, bench_prefill = false, bench_attention = false;
  std::string only;  // ",a,b," or empty: every suite
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) ctx.quick = true;
    else if (std::strcmp(argv[i], "--verbose") == 0) ctx.results.verbose = true;
    else if (std::strcmp(argv[i], "--bench") == 0) bench = true;
    else if (std::strcmp(argv[i], "--bench-matvec") == 0) bench_matvec = true;
    else if (std::strcmp(argv[i], "--bench-staged") == 0) bench_staged = true;
    else if (std::strcmp(argv[i], "--bench-prefill") == 0) bench_prefill = true;
    else if (std::strcmp(argv[i], "--bench-attention") == 0) bench_attention = true;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = "," + std::string(argv[++i]) + ",";
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--verbose] [--bench] [--bench-matvec] [--bench-staged] [--bench-prefill] [--bench-attention] [--only suite,...]\n", argv[0]);
      return 2;
    }
  }
  int device = 0;
  gpuDeviceProp prop{};
  CHECK_GPU(gpuGetDevice(&device));
  CHECK_GPU(gpuGetDeviceProperties(&prop, device));
  std::printf("device %d: %s, %d SMs, warp %d\n", device, prop.name, prop.multiProcessorCount, prop.warpSize);
  if (bench || bench_matvec || bench_staged || bench_prefill || bench_attention) {
    if (bench_prefill) run_prefill_math_benchmarks();
    else if (bench_attention) run_attention_benchmarks(ctx);
    else if (bench_matvec) run_matvec_benchmarks(ctx);
    else if (bench_staged) run_staged_matvec_benchmarks(ctx);
    else run_benchmarks(ctx);
    return 0;
  }
  const struct {
    const char* name;
    void (*run)(Context&);
  } suites[] = {{"matmul", run_matmul_tests},       {"matmul_grouped", run_matmul_grouped_tests},
                {"matmul_experts_prefill", run_matmul_experts_prefill_tests},
                {"ops", run_ops_tests},             {"gdn", run_gdn_tests},
                {"gdn_prefill", run_gdn_prefill_tests}, {"attention", run_attention_tests},
                {"attention_prep", run_attention_prep_tests}, {"moe_fused", run_moe_fused_tests},
                {"moe_down_combine", run_moe_down_combine_tests}, {"exact_tile", run_exact_tile_tests},
                {"draw", run_draw_tests}};
  int suites_run = 0;
  for (const auto& suite : suites) {
    if (!only.empty() && only.find("," + std::string(suite.name) + ",") == std::string::npos) continue;
    suite.run(ctx);
    ++suites_run;
  }
  if (suites_run == 0) {
    std::fprintf(stderr, "--only %s: no such suite\n", only.c_str());
    return 2;
  }
  CHECK_GPU(gpuDeviceSynchronize());

  std::printf("\n%-22s %7s %8s %12s %12s\n", "kernel", "checks", "failed", "worst_nmse", "worst_abs");
  for (const Results::Summary& s : ctx.results.summaries) {
    std::printf("%-22s %7d %8d %12.2e %12.2e\n", s.kernel.c_str(), s.checks, s.failures, s.worst_nmse, s.worst_abs);
  }
  std::printf("\n%d checks passed, %d failed\n", ctx.results.num_pass, ctx.results.num_fail);
  return ctx.results.num_fail == 0 ? 0 : 1;
}
