// GpuBackend against CpuBackend (the oracle) on synthetic hybrids (dense and MoE, every weight
// type the GPU kernels take): prefill of several sequences in one plan, chunked prefill,
// decode, verify rows with keep_row_states + rollback at every kept count then decoding on,
// the MTP head, bitwise batch invariance, slot reuse, flat memory, plan checks.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::expect_bitwise;
using deltaserve::testing::forward_both;
using deltaserve::testing::make_step;
using deltaserve::testing::random_tokens;

struct Case {
  bool moe;
  kernels::DType type;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.moe ? "moe_" : "dense_") + std::string(kernels::dtype_name(info.param.type));
}

constexpr int32_t kBlocksPerSeq = 8;  // 128 positions of 16 tokens
const CacheConfig kCache{4, 16, 4 * kBlocksPerSeq, 4, 256};

class GpuBackendTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    model_ = deltaserve::testing::make_synthetic_model(GetParam().moe, GetParam().type, 1234);
    cpu_ = std::make_unique<CpuBackend>(*model_, kCache, 2);
    gpu_ = std::make_unique<GpuBackend>(*model_, kCache);
    const kernels::DType t = GetParam().type;
    const bool plain = t == kernels::DType::F32 || t == kernels::DType::F16 || t == kernels::DType::BF16;
    tol_ = plain ? 1e-6 : 1e-5;
  }
  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const { return random_tokens(n, model_->config.num_vocab, seed); }
  static std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }
  // Next greedy tokens from the CPU's logits, so both backends then see the same inputs.
  static int32_t greedy(const ForwardOutput& out, int64_t row) {
    const float* l = out.row_logits(row);
    int64_t best = 0;
    for (int64_t i = 1; i < out.num_vocab; ++i)
      if (l[i] > l[best]) best = i;
    return static_cast<int32_t>(best);
  }

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<CpuBackend> cpu_;
  std::unique_ptr<GpuBackend> gpu_;
  double tol_ = 1e-6;
};

TEST_P(GpuBackendTest, PrefillSeveralSequencesThenDecode) {
  BatchPlan plan;
  plan.sequences.push_back(make_step(0, 0, tokens(37, 1), blocks(0), 1, 0));
  plan.sequences.push_back(make_step(2, 0, tokens(5, 2), blocks(2), 5, 5));  // every row's logits
  plan.sequences.push_back(make_step(1, 0, tokens(64, 3), blocks(1), 2, 3));
  ForwardOutput out = forward_both(*cpu_, *gpu_, plan, tol_, "prefill");
  std::vector<int32_t> cached{37, 5, 64};
  for (int step = 0; step < 6; ++step) {
    BatchPlan d;
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const SequenceStep& s = plan.sequences[i];
      const int64_t last = out.logit_begin[i] + (step == 0 ? s.num_logits - 1 : 0);
      d.sequences.push_back(make_step(s.slot, cached[i], {greedy(out, last)}, blocks(s.slot), 1, 1));
      ++cached[i];
    }
    out = forward_both(*cpu_, *gpu_, d, tol_, "decode step " + std::to_string(step));
  }
}

TEST_P(GpuBackendTest, ChunkedPrefillEqualsCpu) {
  const std::vector<int32_t> prompt = tokens(70, 4);
  for (int32_t chunk : {1, 7, 70}) {
    const int32_t slot = chunk == 70 ? 3 : chunk % 3;
    for (int32_t done = 0; done < 70; done += chunk) {
      const int32_t end = std::min(70, done + chunk);
      BatchPlan plan{{make_step(slot, done, {prompt.begin() + done, prompt.begin() + end}, blocks(slot), end == 70 ? 1 : 0)}};
      forward_both(*cpu_, *gpu_, plan, tol_, "chunk " + std::to_string(chunk) + " at " + std::to_string(done));
    }
  }
}

// A verify step of 4 rows on every slot, rollback to k kept rows (k = 1..4 on slots 0..3),
// then three decode steps and a second verify: logits and states follow the CPU's.
TEST_P(GpuBackendTest, VerifyRollbackAtEveryKeptCountThenDecode) {
  const ModelConfig& c = model_->config;
  BatchPlan prefill;
  for (int32_t s = 0; s < 4; ++s) prefill.sequences.push_back(make_step(s, 0, tokens(20 + s, 10 + s), blocks(s), 1));
  forward_both(*cpu_, *gpu_, prefill, tol_, "prefill");
  std::vector<int32_t> cached{20, 21, 22, 23};
  for (int round = 0; round < 2; ++round) {
    BatchPlan verify;
    for (int32_t s = 0; s < 4; ++s)
      verify.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)], tokens(4, 100 + 10 * round + s), blocks(s), 4, 4, true));
    forward_both(*cpu_, *gpu_, verify, tol_, "verify round " + std::to_string(round));
    for (int32_t s = 0; s < 4; ++s) {
      const int32_t kept = (s + round) % 4 + 1;
      cpu_->rollback(s, kept);
      gpu_->rollback(s, kept);
      cached[static_cast<size_t>(s)] += kept;
      for (int g = 0; g < static_cast<int>(c.num_gdn_layers()); ++g) {
        const std::vector<float> delta = gpu_->read_delta_state(g, s), conv = gpu_->read_conv_state(g, s);
        const float* cd = cpu_->delta_state(g, s);
        const float* cc = cpu_->conv_state(g, s);
        EXPECT_LE(deltaserve::testing::nmse(delta, {cd, cd + delta.size()}), tol_) << "delta, slot " << s << " layer " << g;
        EXPECT_LE(deltaserve::testing::nmse(conv, {cc, cc + conv.size()}), tol_) << "conv, slot " << s << " layer " << g;
      }
    }
    for (int step = 0; step < 3; ++step) {
      BatchPlan d;
      for (int32_t s = 0; s < 4; ++s)
        d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 500 + 7 * step + s), blocks(s), 1));
      forward_both(*cpu_, *gpu_, d, tol_, "decode after rollback, round " + std::to_string(round));
    }
  }
  EXPECT_THROW(gpu_->rollback(0, 1), std::invalid_argument);  // no verify step pending
}

TEST_P(GpuBackendTest, MtpHeadEqualsCpu) {
  const int64_t h = model_->config.num_embd;
  const std::vector<int32_t> prompt = tokens(30, 5);
  BatchPlan plan{{make_step(0, 0, prompt, blocks(0), 1, 30)}};
  const ForwardOutput trunk = forward_both(*cpu_, *gpu_, plan, tol_, "trunk");
  // Row t pairs hidden(t) with token t + 1: 29 rows, logits for the last 3.
  MtpPlan mtp;
  MtpSequenceStep s;
  s.num_cached_rows = 0;
  s.tokens.assign(prompt.begin() + 1, prompt.end());
  s.hidden.assign(trunk.hidden.begin(), trunk.hidden.begin() + 29 * h);
  s.kv_blocks = blocks(0);
  s.num_logits = 3;
  mtp.sequences.push_back(s);
  MtpSequenceStep s2 = s;
  s2.tokens.resize(10);
  s2.hidden.resize(static_cast<size_t>(10 * h));
  s2.kv_blocks = blocks(1);
  s2.num_logits = 1;
  mtp.sequences.push_back(s2);
  ForwardOutput c, g;
  cpu_->forward_mtp(mtp, c);
  gpu_->forward_mtp(mtp, g);
  deltaserve::testing::expect_outputs_near(g, c, tol_, "MTP");
  // Chained: one more row each from the MTP's own output.
  MtpPlan next;
  for (size_t i = 0; i < 2; ++i) {
    MtpSequenceStep n;
    n.num_cached_rows = i == 0 ? 29 : 10;
    n.tokens = {static_cast<int32_t>(i + 3)};
    const int64_t row = c.hidden_begin[i] + (i == 0 ? 2 : 0);
    n.hidden.assign(c.hidden.begin() + row * h, c.hidden.begin() + (row + 1) * h);
    n.kv_blocks = blocks(static_cast<int32_t>(i));
    next.sequences.push_back(n);
  }
  cpu_->forward_mtp(next, c);
  gpu_->forward_mtp(next, g);
  deltaserve::testing::expect_outputs_near(g, c, tol_, "MTP chained");
}

// A sequence's logits are bit-identical alone and beside others (prefill, decode, verify).
TEST_P(GpuBackendTest, BatchInvariantBitwise) {
  GpuBackend alone(*model_, kCache);
  const std::vector<int32_t> a = tokens(33, 6);
  ForwardOutput out_alone, out_mixed;
  alone.forward(BatchPlan{{make_step(1, 0, a, blocks(1), 2, 2)}}, out_alone);
  BatchPlan mixed;
  mixed.sequences.push_back(make_step(0, 0, tokens(50, 7), blocks(0), 1));
  mixed.sequences.push_back(make_step(1, 0, a, blocks(1), 2, 2));
  mixed.sequences.push_back(make_step(3, 0, tokens(3, 8), blocks(3), 3));
  gpu_->forward(mixed, out_mixed);
  const int64_t v = out_mixed.num_vocab;
  expect_bitwise(out_alone.logits, {out_mixed.logits.begin() + out_mixed.logit_begin[1] * v,
                                    out_mixed.logits.begin() + (out_mixed.logit_begin[1] + 2) * v}, "prefill");
  BatchPlan verify_alone{{make_step(1, 33, tokens(3, 9), blocks(1), 3, 0, true)}};
  BatchPlan verify_mixed{{make_step(0, 50, tokens(1, 10), blocks(0), 1), make_step(1, 33, tokens(3, 9), blocks(1), 3, 0, true)}};
  alone.forward(verify_alone, out_alone);
  gpu_->forward(verify_mixed, out_mixed);
  expect_bitwise(out_alone.logits, {out_mixed.logits.begin() + v, out_mixed.logits.end()}, "verify");
  alone.rollback(1, 2);
  gpu_->rollback(1, 2);
  alone.forward(BatchPlan{{make_step(1, 35, {4}, blocks(1), 1)}}, out_alone);
  gpu_->forward(BatchPlan{{make_step(3, 3, {5}, blocks(3), 1), make_step(1, 35, {4}, blocks(1), 1)}}, out_mixed);
  expect_bitwise(out_alone.logits, {out_mixed.logits.begin() + v, out_mixed.logits.end()}, "decode after rollback");
}

// A new sequence on a used slot (after a verify step left its live state in the ring) gives
// what a fresh backend gives.
TEST_P(GpuBackendTest, SlotReuseEqualsFresh) {
  const std::vector<int32_t> b = tokens(25, 12);
  ForwardOutput out;
  gpu_->forward(BatchPlan{{make_step(2, 0, tokens(40, 11), blocks(2), 1)}}, out);
  gpu_->forward(BatchPlan{{make_step(2, 40, tokens(3, 13), blocks(2), 3, 0, true)}}, out);
  gpu_->rollback(2, 2);
  gpu_->forward(BatchPlan{{make_step(2, 0, b, blocks(2), 1)}}, out);
  GpuBackend fresh(*model_, kCache);
  ForwardOutput want;
  fresh.forward(BatchPlan{{make_step(2, 0, b, blocks(2), 1)}}, want);
  expect_bitwise(out.logits, want.logits, "reused slot");
}

TEST_P(GpuBackendTest, MemoryStatsFlatOverManySteps) {
  const BackendMemoryStats before = gpu_->memory_stats();
  EXPECT_GT(before.device_bytes_used, 0);
  EXPECT_GT(before.device_bytes_total, before.device_bytes_used);
  EXPECT_EQ(before.pinned_registrations, 1);
  EXPECT_GT(before.pinned_bytes, 0);
  ForwardOutput out;
  for (int request = 0; request < 40; ++request) {
    const int32_t slot = request % 4;
    gpu_->forward(BatchPlan{{make_step(slot, 0, tokens(9 + request % 5, 20 + request), blocks(slot), 1)}}, out);
    gpu_->forward(BatchPlan{{make_step(slot, 9 + request % 5, tokens(4, 70 + request), blocks(slot), 4, 4, true)}}, out);
    gpu_->rollback(slot, 1 + request % 4);
  }
  const BackendMemoryStats after = gpu_->memory_stats();
  EXPECT_EQ(after.device_bytes_used, before.device_bytes_used);
  EXPECT_EQ(after.pinned_bytes, before.pinned_bytes);
  EXPECT_EQ(after.pinned_registrations, before.pinned_registrations);
}

TEST_P(GpuBackendTest, BadPlansThrowBeforeDeviceWork) {
  ForwardOutput out;
  EXPECT_THROW(gpu_->forward(BatchPlan{{make_step(4, 0, {1}, blocks(0), 1)}}, out), std::invalid_argument);
  EXPECT_THROW(gpu_->forward(BatchPlan{{make_step(0, 0, {-1}, blocks(0), 1)}}, out), std::invalid_argument);
  EXPECT_THROW(gpu_->forward(BatchPlan{{make_step(0, 0, {1}, {}, 1)}}, out), std::invalid_argument);
  EXPECT_THROW(gpu_->forward(BatchPlan{{make_step(0, 0, tokens(5, 1), blocks(0), 1, 0, true)}}, out), std::invalid_argument);
  EXPECT_THROW(gpu_->forward(BatchPlan{{make_step(0, 0, tokens(257, 1), block_range(0, 17), 1)}}, out),
               std::invalid_argument);  // over max_step_rows
  EXPECT_THROW(gpu_->forward(BatchPlan{{make_step(0, 600, {1}, std::vector<int32_t>(40, 0), 1)}}, out),
               std::invalid_argument);  // positions past the KV pool (the CPU backend would take it)
  // The backend still works afterwards.
  forward_both(*cpu_, *gpu_, BatchPlan{{make_step(0, 0, tokens(6, 2), blocks(0), 1)}}, tol_, "after bad plans");
}

INSTANTIATE_TEST_SUITE_P(Types, GpuBackendTest,
                         ::testing::Values(Case{false, kernels::DType::F32}, Case{true, kernels::DType::F32},
                                           Case{false, kernels::DType::F16}, Case{true, kernels::DType::BF16},
                                           Case{false, kernels::DType::Q8_0}, Case{true, kernels::DType::Q4_0},
                                           Case{false, kernels::DType::Q4_K}, Case{true, kernels::DType::Q5_K},
                                           Case{true, kernels::DType::Q6_K}),
                         case_name);

}  // namespace
}  // namespace deltaserve::runtime
