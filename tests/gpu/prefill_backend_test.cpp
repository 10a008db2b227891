// The GPU backend's prefill path (tiled matmul, chunked GDN, prefill attention) against its
// load-invariance contract: a prompt gives the same bits however it is cut on the 64-position
// grid (GpuBackend::prefill_chunk_align), a prefill chunk gives the same bits beside decode
// rows as alone, and the decode rows beside it keep their own bits. Closeness to the CPU is
// forward_backend_test's job; these are bitwise.
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
using deltaserve::testing::make_step;
using deltaserve::testing::random_tokens;

constexpr int32_t kBlocksPerSeq = 32;  // 512 positions of 16 tokens
const CacheConfig kCache{3, 16, 3 * kBlocksPerSeq, 1, 512};

struct Case {
  bool moe;
  kernels::DType type;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.moe ? "moe_" : "dense_") + std::string(kernels::dtype_name(info.param.type));
}

class GpuPrefillTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { model_ = deltaserve::testing::make_synthetic_model(GetParam().moe, GetParam().type, 4321); }
  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const { return random_tokens(n, model_->config.num_vocab, seed); }
  static std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }

  // Prefills `prompt` on slot 0 of a fresh backend in calls ending at `cuts` (then the end),
  // then one decode step; returns the last prompt row's logits followed by the decode logits.
  std::vector<float> prefill_in_calls(const std::vector<int32_t>& prompt, const std::vector<int32_t>& cuts) {
    GpuBackend gpu(*model_, kCache);
    ForwardOutput out;
    int32_t done = 0;
    std::vector<int32_t> ends = cuts;
    ends.push_back(static_cast<int32_t>(prompt.size()));
    for (const int32_t end : ends) {
      const bool last = end == static_cast<int32_t>(prompt.size());
      gpu.forward(BatchPlan{{make_step(0, done, {prompt.begin() + done, prompt.begin() + end}, blocks(0), last ? 1 : 0)}}, out);
      done = end;
    }
    std::vector<float> logits = out.logits;
    gpu.forward(BatchPlan{{make_step(0, done, {7}, blocks(0), 1)}}, out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    return logits;
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_P(GpuPrefillTest, AlignedCutsGiveTheSameBits) {
  const std::vector<int32_t> prompt = tokens(300, 1);
  const std::vector<float> whole = prefill_in_calls(prompt, {});
  expect_bitwise(prefill_in_calls(prompt, {64, 192}), whole, "cut at 64 and 192");
  expect_bitwise(prefill_in_calls(prompt, {256}), whole, "cut at 256");
  expect_bitwise(prefill_in_calls(prompt, {128, 192, 256}), whole, "cut at 128, 192, 256");
}

TEST_P(GpuPrefillTest, PrefillBesideDecodeRowsKeepsEveryRowsBits) {
  const std::vector<int32_t> a = tokens(40, 2), b = tokens(150, 3);
  // Alone: A prefilled then decoding one row; B prefilled by itself.
  GpuBackend alone(*model_, kCache);
  ForwardOutput out;
  alone.forward(BatchPlan{{make_step(1, 0, a, blocks(1), 1)}}, out);
  alone.forward(BatchPlan{{make_step(1, 40, {5}, blocks(1), 1)}}, out);
  const std::vector<float> a_decode = out.logits;
  alone.forward(BatchPlan{{make_step(2, 0, b, blocks(2), 3)}}, out);
  const std::vector<float> b_prefill = out.logits;
  // Mixed: A's decode row and B's whole prompt in one step (B first in the plan).
  GpuBackend mixed(*model_, kCache);
  mixed.forward(BatchPlan{{make_step(1, 0, a, blocks(1), 1)}}, out);
  BatchPlan plan;
  plan.sequences.push_back(make_step(2, 0, b, blocks(2), 3));
  plan.sequences.push_back(make_step(1, 40, {5}, blocks(1), 1));
  mixed.forward(plan, out);
  const int64_t v = out.num_vocab;
  ASSERT_EQ(out.logit_begin, (std::vector<int64_t>{0, 3}));
  expect_bitwise({out.logits.begin(), out.logits.begin() + 3 * v}, b_prefill, "prefill chunk beside a decode row");
  expect_bitwise({out.logits.begin() + 3 * v, out.logits.end()}, a_decode, "decode row beside a prefill chunk");
}

// The same with two decode rows beside the prompt: under the staged matvec (MoE, Q4_0) steps of
// 1-16 decode rows combine them in the fused down + combine launch and the prompt's rows in the
// separate combine after it (rows offset by the decode rows), so both paths meet in one step.
TEST_P(GpuPrefillTest, PrefillBesideTwoDecodeRowsKeepsEveryRowsBits) {
  const std::vector<int32_t> a0 = tokens(40, 4), a1 = tokens(23, 5), b = tokens(150, 6);
  ForwardOutput out;
  GpuBackend alone(*model_, kCache);
  alone.forward(BatchPlan{{make_step(0, 0, a0, blocks(0), 1), make_step(1, 0, a1, blocks(1), 1)}}, out);
  alone.forward(BatchPlan{{make_step(0, 40, {5}, blocks(0), 1), make_step(1, 23, {9}, blocks(1), 1)}}, out);
  const std::vector<float> decode_rows = out.logits;
  alone.forward(BatchPlan{{make_step(2, 0, b, blocks(2), 3)}}, out);
  const std::vector<float> b_prefill = out.logits;
  GpuBackend mixed(*model_, kCache);
  mixed.forward(BatchPlan{{make_step(0, 0, a0, blocks(0), 1), make_step(1, 0, a1, blocks(1), 1)}}, out);
  BatchPlan plan;
  plan.sequences.push_back(make_step(2, 0, b, blocks(2), 3));
  plan.sequences.push_back(make_step(0, 40, {5}, blocks(0), 1));
  plan.sequences.push_back(make_step(1, 23, {9}, blocks(1), 1));
  mixed.forward(plan, out);
  const int64_t v = out.num_vocab;
  ASSERT_EQ(out.logit_begin, (std::vector<int64_t>{0, 3, 4}));
  expect_bitwise({out.logits.begin(), out.logits.begin() + 3 * v}, b_prefill, "prefill chunk beside two decode rows");
  expect_bitwise({out.logits.begin() + 3 * v, out.logits.end()}, decode_rows, "two decode rows beside a prefill chunk");
}

TEST_P(GpuPrefillTest, HiddenRowsFollowThePlanOrder) {
  // Two prefill chunks around a decode row: hidden rows come back in plan order.
  const int64_t h = model_->config.num_embd;
  GpuBackend gpu(*model_, kCache);
  ForwardOutput out, ref;
  gpu.forward(BatchPlan{{make_step(1, 0, tokens(10, 4), blocks(1), 1)}}, out);
  BatchPlan plan;
  plan.sequences.push_back(make_step(0, 0, tokens(20, 5), blocks(0), 1, 2));
  plan.sequences.push_back(make_step(1, 10, {9}, blocks(1), 1, 1));
  plan.sequences.push_back(make_step(2, 0, tokens(30, 6), blocks(2), 2, 2));
  gpu.forward(plan, out);
  EXPECT_EQ(out.hidden_begin, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(out.logit_begin, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_EQ(out.hidden.size(), static_cast<size_t>(5 * h));
  GpuBackend third(*model_, kCache);
  third.forward(BatchPlan{{make_step(2, 0, tokens(30, 6), blocks(2), 2, 2)}}, ref);
  expect_bitwise({out.hidden.begin() + 3 * h, out.hidden.end()}, ref.hidden, "third sequence's hidden rows");
}

INSTANTIATE_TEST_SUITE_P(Types, GpuPrefillTest,
                         ::testing::Values(Case{false, kernels::DType::F32}, Case{true, kernels::DType::Q4_0},
                                           Case{false, kernels::DType::Q8_0}, Case{true, kernels::DType::BF16},
                                           Case{true, kernels::DType::Q6_K}),
                         case_name);

}  // namespace
}  // namespace deltaserve::runtime
