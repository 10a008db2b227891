// Shared helpers of the GPU backend tests: run one plan on the CPU backend (the oracle) and
// the GPU backend and compare every output by NMSE = sum (gpu - cpu)^2 / sum cpu^2.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/gpu/gpu_backend.h"
#include "runtime/greedy.h"

namespace deltaserve::testing {

inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 1e30;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0.0 ? num / den : num;
}

// Same shape and bookkeeping, logits and hidden rows within tol; the GPU's ids are the argmax
// of its own host logit rows.
inline void expect_outputs_near(const runtime::ForwardOutput& gpu, const runtime::ForwardOutput& cpu, double tol,
                                const std::string& what) {
  EXPECT_EQ(gpu.num_rows, cpu.num_rows) << what;
  EXPECT_EQ(gpu.num_vocab, cpu.num_vocab) << what;
  EXPECT_EQ(gpu.logit_begin, cpu.logit_begin) << what;
  EXPECT_EQ(gpu.hidden_begin, cpu.hidden_begin) << what;
  ASSERT_EQ(gpu.logits.size(), cpu.logits.size()) << what;
  ASSERT_EQ(gpu.hidden.size(), cpu.hidden.size()) << what;
  EXPECT_LE(nmse(gpu.logits, cpu.logits), tol) << what << ": logits";
  EXPECT_LE(nmse(gpu.hidden, cpu.hidden), tol) << what << ": hidden";
  EXPECT_EQ(gpu.host_logit_begin, cpu.host_logit_begin) << what;
  ASSERT_EQ(static_cast<int64_t>(gpu.argmax_ids.size()), gpu.num_rows) << what;
  for (size_t i = 0; i < gpu.logit_begin.size(); ++i) {
    if (gpu.host_logit_begin[i] < 0) continue;
    for (int64_t j = 0; j < gpu.sequence_logit_rows(i); ++j)
      EXPECT_EQ(gpu.argmax_ids[static_cast<size_t>(gpu.logit_begin[i] + j)],
                runtime::argmax_token(gpu.sequence_logits(i, j), gpu.num_vocab))
          << what << ": sequence " << i << " row " << j;
  }
}

inline void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " values differ";
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// Blocks [first, first + count): one sequence's block table.
inline std::vector<int32_t> block_range(int32_t first, int32_t count) {
  std::vector<int32_t> b(static_cast<size_t>(count));
  std::iota(b.begin(), b.end(), first);
  return b;
}

inline runtime::SequenceStep make_step(int32_t slot, int32_t cached, std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                                       int32_t num_logits, int32_t num_hidden = 0, bool keep = false) {
  runtime::SequenceStep s;
  s.slot = slot;
  s.num_cached_tokens = cached;
  s.tokens = std::move(tokens);
  s.kv_blocks = std::move(blocks);
  s.num_logits = num_logits;
  s.num_hidden = num_hidden;
  s.keep_row_states = keep;
  return s;
}

// Runs the plan on both backends; returns the GPU output and checks it against the CPU's.
inline runtime::ForwardOutput forward_both(runtime::CpuBackend& cpu, runtime::GpuBackend& gpu, const runtime::BatchPlan& plan,
                                           double tol, const std::string& what) {
  runtime::ForwardOutput c, g;
  cpu.forward(plan, c);
  gpu.forward(plan, g);
  expect_outputs_near(g, c, tol, what);
  return g;
}

}  // namespace deltaserve::testing
