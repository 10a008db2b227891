// GpuBackend's greedy ids (ForwardOutput::argmax_ids, one argmax_gpu launch after the LM
// head): every id is the argmax (runtime/greedy.h's rule) of the GPU's own logits row; rows of
// sequences with logits_to_host = false are not copied (bytes_to_host_last_forward() stays at
// the hidden rows + ids) while the other sequences' rows are bitwise those of the all-to-host
// run; trunk and MTP alike; graph replays give the same ids as eager runs.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/sampling/draw_ref.h"
#include "runtime/greedy.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::expect_bitwise;
using deltaserve::testing::make_step;
using deltaserve::testing::random_tokens;

constexpr int32_t kBlocksPerSeq = 8;
const CacheConfig kCache{4, 16, 4 * kBlocksPerSeq, 4, 256};

std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }

BatchPlan with_to_host(BatchPlan plan, const std::vector<bool>& to_host) {
  for (size_t i = 0; i < plan.sequences.size(); ++i) plan.sequences[i].logits_to_host = to_host[i];
  return plan;
}

// Every logit row's id is the host argmax of that row (all rows on the host).
void expect_ids_are_argmax(const ForwardOutput& out, const std::string& what) {
  ASSERT_EQ(out.host_logit_begin, out.logit_begin) << what;
  ASSERT_EQ(static_cast<int64_t>(out.argmax_ids.size()), out.num_rows) << what;
  for (int64_t r = 0; r < out.num_rows; ++r)
    EXPECT_EQ(out.argmax_ids[static_cast<size_t>(r)], argmax_token(out.row_logits(r), out.num_vocab)) << what << " row " << r;
}

// `part` (some sequences off the host) against `all` (the same step, every sequence on the
// host, on a twin backend): same ids and hidden rows, host rows bitwise equal.
void expect_compacted(const ForwardOutput& part, const ForwardOutput& all, const std::string& what) {
  EXPECT_EQ(part.argmax_ids, all.argmax_ids) << what;
  expect_bitwise(part.hidden, all.hidden, what + ": hidden");
  const int64_t v = all.num_vocab;
  int64_t host_rows = 0;
  for (size_t i = 0; i < part.logit_begin.size(); ++i) {
    if (part.host_logit_begin[i] < 0) continue;
    const int64_t rows = part.sequence_logit_rows(i);
    host_rows += rows;
    if (rows == 0) continue;
    expect_bitwise({part.sequence_logits(i), part.sequence_logits(i) + rows * v},
                   {all.sequence_logits(i), all.sequence_logits(i) + rows * v}, what + ": sequence " + std::to_string(i));
  }
  EXPECT_EQ(part.num_host_rows(), host_rows) << what;
}

class GpuArgmaxTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q8_0, 91);
    all_ = std::make_unique<GpuBackend>(*model_, kCache);
    part_ = std::make_unique<GpuBackend>(*model_, kCache);
  }
  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const { return random_tokens(n, model_->config.num_vocab, seed); }
  // The step on both twins: `all` with every sequence on the host, `part` as to_host says.
  void both(const BatchPlan& plan, const std::vector<bool>& to_host, ForwardOutput& all, ForwardOutput& part,
            const std::string& what) {
    all_->forward(with_to_host(plan, std::vector<bool>(plan.sequences.size(), true)), all);
    part_->forward(with_to_host(plan, to_host), part);
    expect_ids_are_argmax(all, what);
    expect_compacted(part, all, what);
  }
  // Bytes of a step's hidden rows and ids, with the output buffer's alignment.
  int64_t hidden_and_ids_bytes(int64_t hidden_rows, int64_t logit_rows) const {
    return ((hidden_rows * model_->config.num_embd + 3) / 4 * 4 + logit_rows) * 4;
  }

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<GpuBackend> all_, part_;
};

TEST_P(GpuArgmaxTest, IdsAreTheArgmaxOfTheOwnLogitsAndOnlyHostRowsAreCopied) {
  const int64_t v = model_->config.num_vocab;
  ForwardOutput all, part;
  BatchPlan prefill;
  for (int32_t s = 0; s < 3; ++s)
    prefill.sequences.push_back(make_step(s, 0, tokens(9 + 4 * s, s), blocks(s), 1 + s, 9 + 4 * s));
  both(prefill, {false, true, false}, all, part, "prefill");
  EXPECT_EQ(part.host_logit_begin, (std::vector<int64_t>{-1, 0, -1}));
  EXPECT_GE(all_->bytes_to_host_last_forward(), all.num_rows * v * 4);
  EXPECT_LE(part_->bytes_to_host_last_forward(), hidden_and_ids_bytes(part.num_hidden_rows, part.num_rows) + 2 * v * 4);
  // Decode (graph-eligible) and verify rows with nothing on the host: hidden rows + ids only.
  std::vector<int32_t> cached{9, 13, 17};
  for (int step = 0; step < 3; ++step) {
    BatchPlan d;
    for (int32_t s = 0; s < 3; ++s)
      d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 50 + step * 3 + s), blocks(s), 1, 1));
    both(d, {false, false, false}, all, part, "decode " + std::to_string(step));
    EXPECT_TRUE(part.logits.empty());
    EXPECT_LE(part_->bytes_to_host_last_forward(), hidden_and_ids_bytes(3, 3));
    EXPECT_LT(part_->bytes_to_host_last_forward(), all_->bytes_to_host_last_forward());
  }
  BatchPlan verify;
  for (int32_t s = 0; s < 3; ++s)
    verify.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)], tokens(3, 80 + s), blocks(s), 3, 3, true));
  both(verify, {false, true, false}, all, part, "verify");
  EXPECT_EQ(part.host_logit_begin, (std::vector<int64_t>{-1, 0, -1}));
  EXPECT_LE(part_->bytes_to_host_last_forward(), hidden_and_ids_bytes(9, 9) + 3 * v * 4);
}

TEST_P(GpuArgmaxTest, MtpRowsIdsAndHostRows) {
  const int64_t h = model_->config.num_embd;
  const std::vector<int32_t> prompt = tokens(20, 7);
  ForwardOutput trunk;
  all_->forward(BatchPlan{{make_step(0, 0, prompt, blocks(0), 1, 20)}}, trunk);
  MtpPlan mtp;
  for (int32_t i = 0; i < 2; ++i) {
    MtpSequenceStep s;
    const int64_t rows = i == 0 ? 19 : 6;
    s.tokens.assign(prompt.begin() + 1, prompt.begin() + 1 + rows);
    s.hidden.assign(trunk.hidden.begin(), trunk.hidden.begin() + rows * h);
    s.kv_blocks = blocks(i);
    s.num_logits = i == 0 ? 2 : 1;
    mtp.sequences.push_back(s);
  }
  ForwardOutput all, part;
  all_->forward_mtp(mtp, all);
  mtp.sequences[0].logits_to_host = false;
  part_->forward_mtp(mtp, part);
  expect_ids_are_argmax(all, "MTP");
  expect_compacted(part, all, "MTP");
  EXPECT_EQ(part.host_logit_begin, (std::vector<int64_t>{-1, 0}));
  mtp.sequences[1].logits_to_host = false;
  part_->forward_mtp(mtp, part);
  EXPECT_TRUE(part.logits.empty());
  EXPECT_EQ(part.argmax_ids, all.argmax_ids);
  EXPECT_LE(part_->bytes_to_host_last_forward(), hidden_and_ids_bytes(3, 3));
}

TEST_P(GpuArgmaxTest, GraphReplaysGiveTheEagerIds) {
  all_->set_graphs_enabled(false);
  part_->set_graphs_enabled(true);
  std::vector<int32_t> cached{0, 0};
  for (int32_t s = 0; s < 2; ++s) {
    const BatchPlan p{{make_step(s, 0, tokens(11, 20 + s), blocks(s), 1)}};
    ForwardOutput a, b;
    all_->forward(p, a);
    part_->forward(p, b);
    cached[static_cast<size_t>(s)] = 11;
  }
  for (int step = 0; step < 6; ++step) {
    BatchPlan d;
    for (int32_t s = 0; s < 2; ++s)
      d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 90 + 2 * step + s), blocks(s), 1));
    ForwardOutput eager, replay;
    all_->forward(with_to_host(d, {false, false}), eager);
    part_->forward(with_to_host(d, {false, false}), replay);
    EXPECT_EQ(replay.argmax_ids, eager.argmax_ids) << "step " << step;
    EXPECT_EQ(part_->launches_last_forward(), all_->launches_last_forward()) << "step " << step;
  }
  EXPECT_GT(part_->graph_replays(), 0);
}

// Draws (SequenceStep::draws, draw_gpu after the LM head): every drawn id is draw_ref over the
// GPU's own logits row; the same ids with the logits left on the device, under graph replays
// (decode steps) and eager launches (verify rows), trunk and MTP alike; rows without draws
// report -1.
TEST_P(GpuArgmaxTest, DrawsAreTheRuleOverTheOwnLogits) {
  part_->set_graphs_enabled(true);
  auto params = [](int step, int row) {
    kernels::DrawParams p;
    p.inv_temperature = 1.0f / (0.5f + 0.25f * static_cast<float>(row % 4));
    p.top_k = row % 3 == 0 ? 0 : 5 + row;
    p.top_p = row % 2 == 0 ? 1.0f : 0.9f;
    p.min_p = row % 5 == 4 ? 0.05f : 0.0f;
    p.word = 0x9E3779B9u * static_cast<uint32_t>(step * 16 + row + 1);
    return p;
  };
  auto expect_rule = [&](const ForwardOutput& all, const ForwardOutput& part, const std::vector<bool>& drawn, const std::string& what) {
    ASSERT_EQ(static_cast<int64_t>(all.drawn_ids.size()), all.num_rows) << what;
    for (size_t i = 0; i < drawn.size(); ++i) {
      for (int64_t j = 0; j < all.sequence_logit_rows(i); ++j) {
        const auto r = static_cast<size_t>(all.logit_begin[i] + j);
        if (!drawn[i]) {
          EXPECT_EQ(all.drawn_ids[r], -1) << what;
          continue;
        }
        kernels::DrawParams p = params(static_cast<int>(what.size()), static_cast<int>(r));
        EXPECT_EQ(all.drawn_ids[r], kernels::draw_ref(all.sequence_logits(i, j), all.num_vocab, p)) << what << " row " << r;
      }
    }
    EXPECT_EQ(part.drawn_ids, all.drawn_ids) << what;
  };
  auto with_draws = [&](BatchPlan plan, const std::vector<bool>& drawn, const std::string& what) {
    int row = 0;
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      SequenceStep& s = plan.sequences[i];
      for (int32_t j = 0; j < s.num_logits; ++j, ++row)
        if (drawn[i]) s.draws.push_back(params(static_cast<int>(what.size()), row));
    }
    return plan;
  };
  ForwardOutput all, part;
  BatchPlan prefill;
  for (int32_t s = 0; s < 3; ++s) prefill.sequences.push_back(make_step(s, 0, tokens(9, 30 + s), blocks(s), 1, 9));
  all_->forward(prefill, all);
  part_->forward(prefill, part);
  std::vector<int32_t> cached{9, 9, 9};
  for (int step = 0; step < 4; ++step) {
    BatchPlan d;
    for (int32_t s = 0; s < 3; ++s)
      d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 60 + step * 3 + s), blocks(s), 1, 1));
    const std::string what = "decode " + std::string(static_cast<size_t>(step), '.');
    const std::vector<bool> drawn{true, false, true};
    all_->forward(with_to_host(with_draws(d, drawn, what), {true, true, true}), all);
    part_->forward(with_to_host(with_draws(d, drawn, what), {false, false, false}), part);
    expect_rule(all, part, drawn, what);
  }
  BatchPlan verify;
  for (int32_t s = 0; s < 3; ++s)
    verify.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)], tokens(3, 90 + s), blocks(s), 3, 3, true));
  const std::vector<bool> drawn{false, true, true};
  all_->forward(with_to_host(with_draws(verify, drawn, "verify"), {true, true, true}), all);
  part_->forward(with_to_host(with_draws(verify, drawn, "verify"), {false, false, false}), part);
  expect_rule(all, part, drawn, "verify");
  EXPECT_GT(part_->graph_replays(), 0);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuArgmaxTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return std::string(i.param ? "moe" : "dense"); });

}  // namespace
}  // namespace deltaserve::runtime
