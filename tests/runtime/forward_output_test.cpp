// ForwardOutput's greedy ids and host rows (runtime/batch_plan.h) on the CPU backend:
// argmax_ids is the host argmax of every logit row, whatever logits_to_host says; rows of
// sequences with logits_to_host = false are neither stored nor reachable; the layout of the
// others is the all-to-host layout compacted. Plus the greedy rule itself (runtime/greedy.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/greedy.h"
#include "runtime/model_weights.h"
#include "runtime/sampler.h"

namespace deltaserve::runtime {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(GreedyRule, LowestIdOnTiesNaNNeverWins) {
  EXPECT_EQ(argmax_token(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax_token(std::vector<float>{kNaN, 1, 5, kNaN, 5}), 2);
  EXPECT_EQ(argmax_token(std::vector<float>{kNaN, kNaN}), 0);
  EXPECT_EQ(argmax_token(std::vector<float>{-kInf, -kInf, -kInf}), 0);
  EXPECT_EQ(argmax_token(std::vector<float>{-kInf, kNaN, -3}), 2);
  EXPECT_EQ(argmax_token(std::vector<float>{}), 0);
  // The sampler's greedy pick is the same rule (NaN in front included).
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const Sampler sampler(greedy, 1);
  const std::vector<float> row{kNaN, 0.5f, 2.0f, 2.0f};
  EXPECT_EQ(sampler.sample(row).id, 2);
}

TEST(GreedyRule, OnlyArgmaxNeededExcludesEverythingThatMovesOrReadsLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(only_argmax_needed(p));
  p.top_k = 5;  // filters do not matter to greedy
  p.top_p = 0.5f;
  p.seed = 3;
  EXPECT_TRUE(only_argmax_needed(p));
  auto with = [&](auto change) {
    SamplingParams q = p;
    change(q);
    return only_argmax_needed(q);
  };
  EXPECT_FALSE(with([](SamplingParams& q) { q.temperature = 0.7f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.logprobs = true; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.top_logprobs = 1; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.logit_bias = {{3, 1.0f}}; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.repetition_penalty = 1.1f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.presence_penalty = 0.5f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.frequency_penalty = -0.5f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.repetition_penalty = kNaN; }));
}

class ForwardOutputTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = load_model("tests/fixtures/tiny_moe/model-f32.gguf"); }

  static SequenceStep step(int32_t slot, int32_t first_block, int32_t num_tokens, int32_t num_logits, bool to_host) {
    SequenceStep s;
    s.slot = slot;
    for (int32_t t = 0; t < num_tokens; ++t) s.tokens.push_back((slot * 31 + t * 7 + 3) % 97);
    for (int32_t b = 0; b < 4; ++b) s.kv_blocks.push_back(first_block + b);
    s.num_logits = num_logits;
    s.num_hidden = num_tokens;
    s.logits_to_host = to_host;
    return s;
  }

  // The same plan on a fresh backend with every sequence's logits on the host.
  ForwardOutput all_to_host(BatchPlan plan) const {
    for (SequenceStep& s : plan.sequences) s.logits_to_host = true;
    CpuBackend backend(*model_, CacheConfig{4, 16, 32}, 2);
    ForwardOutput out;
    backend.forward(plan, out);
    return out;
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_F(ForwardOutputTest, ArgmaxIdsForEveryRowLogitsOnlyForHostSequences) {
  const BatchPlan plan{{step(0, 0, 5, 2, true), step(1, 4, 4, 3, false), step(2, 8, 1, 1, true), step(3, 12, 3, 0, false)}};
  CpuBackend backend(*model_, CacheConfig{4, 16, 32}, 2);
  ForwardOutput out;
  backend.forward(plan, out);
  const ForwardOutput ref = all_to_host(plan);
  const int64_t v = model_->config.num_vocab;

  ASSERT_EQ(out.num_rows, 6);
  EXPECT_EQ(out.logit_begin, (std::vector<int64_t>{0, 2, 5, 6}));
  EXPECT_EQ(out.host_logit_begin, (std::vector<int64_t>{0, -1, 2, -1}));
  EXPECT_EQ(ref.host_logit_begin, ref.logit_begin);
  EXPECT_EQ(out.hidden_begin, ref.hidden_begin);
  EXPECT_EQ(out.hidden, ref.hidden);
  // Logits of the host sequences only: 2 + 1 rows, equal to the all-to-host rows.
  ASSERT_EQ(out.num_host_rows(), 3);
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(3 * v));
  for (size_t i : {size_t{0}, size_t{2}})
    for (int64_t j = 0; j < out.sequence_logit_rows(i); ++j)
      EXPECT_EQ(std::vector<float>(out.sequence_logits(i, j), out.sequence_logits(i, j) + v),
                std::vector<float>(ref.sequence_logits(i, j), ref.sequence_logits(i, j) + v))
          << "sequence " << i << " row " << j;
  EXPECT_THROW(out.sequence_logits(1), std::logic_error);
  EXPECT_THROW(out.sequence_logits(0, 2), std::logic_error);
  // Ids: every logit row, the host argmax of the reference logits.
  ASSERT_EQ(out.argmax_ids.size(), 6u);
  EXPECT_EQ(out.argmax_ids, ref.argmax_ids);
  for (int64_t r = 0; r < ref.num_rows; ++r)
    EXPECT_EQ(ref.argmax_ids[static_cast<size_t>(r)], argmax_token(ref.row_logits(r), v)) << "row " << r;
}

TEST_F(ForwardOutputTest, NoSequenceToHostLeavesNoLogits) {
  const BatchPlan plan{{step(0, 0, 3, 3, false), step(1, 4, 1, 1, false)}};
  CpuBackend backend(*model_, CacheConfig{4, 16, 32}, 2);
  ForwardOutput out;
  out.logits.assign(100, 1.0f);  // a reused output: stale rows must go
  backend.forward(plan, out);
  EXPECT_TRUE(out.logits.empty());
  EXPECT_EQ(out.num_host_rows(), 0);
  EXPECT_EQ(out.argmax_ids, all_to_host(plan).argmax_ids);
}

TEST_F(ForwardOutputTest, MtpRowsFollowTheSameContract) {
  ASSERT_TRUE(model_->weights.has_mtp);
  CpuBackend trunk_backend(*model_, CacheConfig{4, 16, 32}, 2);
  ForwardOutput trunk;
  trunk_backend.forward(BatchPlan{{step(0, 0, 6, 1, true), step(1, 4, 4, 1, true)}}, trunk);
  const int64_t h = model_->config.num_embd, v = model_->config.num_vocab;
  auto mtp_plan = [&](bool first_to_host, bool second_to_host) {
    MtpPlan plan;
    for (int i = 0; i < 2; ++i) {
      MtpSequenceStep& s = plan.sequences.emplace_back();
      const int64_t rows = i == 0 ? 5 : 3;
      const int64_t first_hidden = trunk.hidden_begin[static_cast<size_t>(i)];
      for (int64_t r = 0; r < rows; ++r) s.tokens.push_back(static_cast<int32_t>((r * 11 + i) % 97));
      s.hidden.assign(trunk.hidden.begin() + first_hidden * h, trunk.hidden.begin() + (first_hidden + rows) * h);
      for (int32_t b = 0; b < 4; ++b) s.kv_blocks.push_back(16 + 4 * i + b);
      s.num_logits = i == 0 ? 2 : 1;
      s.logits_to_host = i == 0 ? first_to_host : second_to_host;
    }
    return plan;
  };
  ForwardOutput ref, out;
  CpuBackend a(*model_, CacheConfig{4, 16, 32}, 2), b(*model_, CacheConfig{4, 16, 32}, 2);
  a.forward_mtp(mtp_plan(true, true), ref);
  b.forward_mtp(mtp_plan(false, true), out);
  EXPECT_EQ(out.argmax_ids, ref.argmax_ids);
  EXPECT_EQ(out.host_logit_begin, (std::vector<int64_t>{-1, 0}));
  EXPECT_EQ(out.hidden, ref.hidden);
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(v));
  EXPECT_EQ(std::vector<float>(out.sequence_logits(1), out.sequence_logits(1) + v),
            std::vector<float>(ref.sequence_logits(1), ref.sequence_logits(1) + v));
  for (int64_t r = 0; r < ref.num_rows; ++r)
    EXPECT_EQ(ref.argmax_ids[static_cast<size_t>(r)], argmax_token(ref.row_logits(r), v)) << "row " << r;
}

}  // namespace
}  // namespace deltaserve::runtime
