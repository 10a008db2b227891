// GpuBackend's step graphs and launch counter: a backend replaying captured graphs gives the
// same bits as one running every launch eagerly (decode, verify rows, decode after rollback,
// sequences joining and leaving), the shapes recur (captures < replays), and the eager launch
// count equals the captured graph's node count and the per-layer formula of the code path.
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

constexpr int32_t kBlocksPerSeq = 8;
const CacheConfig kCache{4, 16, 4 * kBlocksPerSeq, 4, 256};

std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }

// Launches of one decode step of at most 4 rows by the code path (runtime/gpu), with the
// default settings: per block 2 norms (attn_norm, and the FFN's input norm: a separate
// rms_norm launch for dense models, inside the MoE router's launch for MoE ones), the mixer's (GDN: projections,
// step with the gated norm fused, output = 3; attention: projections, one fused q/k norm +
// RoPE + KV append, attention's chunks and its combine, output = 5) and the FFN's (MoE 4:
// router with top-k, gate*up, down, combine; dense 2), plus embedding and the head (gather,
// norm, gather, LM head, argmax). MoE: every block after the first takes its attn_norm from
// the previous block's combine launch (one norm fewer each); dense: the next block's norm is
// its own launch at the end of the FFN (same count). Under the staged matvec (fused_down: the
// default on devices with bf16 tensor cores at these few slots) the MoE down products and the
// combine of steps of 1-16 rows are one launch (MoE 3).
// Deferred norms (dense models under the staged matvec, every row count): only the first
// block's input norm is a launch of its own (or carried).
// Assumes every projection group shares one weight type, as the synthetic models do.
int64_t expected_launches(const ModelConfig& c, bool fused_down, bool carried_norms, bool deferred_norms) {
  const int64_t ffn = c.is_moe() ? (fused_down ? 3 : 4) : 2;
  const int64_t fused_norms = c.is_moe() ? (c.num_layers - 1) + c.num_layers : deferred_norms ? 2 * c.num_layers - 1 : 0;
  // Norms carried into the products (the staged matvec, steps of up to 4 decode rows): MoE the
  // first block's input norm (the others ride in launches already), dense both norms of every
  // block (with deferred norms, the first block's input norm only).
  const int64_t carried = carried_norms ? (c.is_moe() || deferred_norms ? 1 : 2 * c.num_layers) : 0;
  return 1 + c.num_gdn_layers() * (2 + 3 + ffn) + c.num_attention_layers() * (2 + 5 + ffn) - fused_norms - carried + 5;
}

class GpuGraphTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q4_0, 77);
    graph_ = std::make_unique<GpuBackend>(*model_, kCache);
    eager_ = std::make_unique<GpuBackend>(*model_, kCache);
    graph_->set_graphs_enabled(true);
    eager_->set_graphs_enabled(false);
  }
  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const { return random_tokens(n, model_->config.num_vocab, seed); }
  // Runs the plan on both; bitwise equal outputs; equal launch counts.
  void both(const BatchPlan& plan, const std::string& what) {
    ForwardOutput g, e;
    graph_->forward(plan, g);
    eager_->forward(plan, e);
    expect_bitwise(g.logits, e.logits, what + ": logits");
    expect_bitwise(g.hidden, e.hidden, what + ": hidden");
    EXPECT_EQ(g.argmax_ids, e.argmax_ids) << what;
    EXPECT_EQ(graph_->launches_last_forward(), eager_->launches_last_forward()) << what;
  }

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<GpuBackend> graph_, eager_;
};

TEST_P(GpuGraphTest, ReplayEqualsEagerBitwise) {
  BatchPlan prefill;
  for (int32_t s = 0; s < 3; ++s) prefill.sequences.push_back(make_step(s, 0, tokens(10 + 3 * s, s), blocks(s), 1));
  both(prefill, "prefill");  // uneven rows: eager on both
  EXPECT_EQ(graph_->graph_captures(), 0);
  std::vector<int32_t> cached{10, 13, 16};
  auto decode = [&](const std::vector<int32_t>& slots, int step) {
    BatchPlan d;
    for (int32_t s : slots) d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 100 + 7 * step + s), blocks(s), 1, 1));
    both(d, "decode step " + std::to_string(step));
  };
  for (int step = 0; step < 4; ++step) decode({0, 1, 2}, step);
  const int64_t launches = eager_->launches_last_forward();
  const bool fused_down = eager_->speed_settings().find("MoE down + combine fused at") != std::string::npos;  // 3 rows: in range
  // 3 rows: past the carried input norms' bound (gpu::kCarriedInputNormMaxRows), else carried.
  const bool carried = eager_->speed_settings().find("input norms in the products on") != std::string::npos &&
                       3 <= gpu::kCarriedInputNormMaxRows;
  const bool deferred = !model_->config.is_moe() && eager_->speed_settings().find("deferred norms on") != std::string::npos;
  EXPECT_EQ(launches, expected_launches(model_->config, fused_down, carried, deferred)) << eager_->speed_settings();
  // Verify rows (3 each), rollback to different kept counts, decode on: same bits.
  for (int round = 0; round < 2; ++round) {
    BatchPlan v;
    for (int32_t s = 0; s < 3; ++s)
      v.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)], tokens(3, 200 + 10 * round + s), blocks(s), 3, 3, true));
    both(v, "verify round " + std::to_string(round));
    for (int32_t s = 0; s < 3; ++s) {
      const int32_t kept = (s + round) % 3 + 1;
      graph_->rollback(s, kept);
      eager_->rollback(s, kept);
      cached[static_cast<size_t>(s)] += kept;
    }
    for (int step = 0; step < 2; ++step) decode({0, 1, 2}, 10 + 2 * round + step);
  }
  // A sequence leaves, one joins (slot 3, a 1-token prompt: its reset runs before the replay).
  decode({2, 0}, 20);
  cached[3] = 0;
  decode({3, 1, 0, 2}, 21);
  decode({3, 1, 0, 2}, 22);
  decode({2, 0}, 23);
  EXPECT_GT(graph_->graph_captures(), 0);
  EXPECT_GT(graph_->graph_replays(), graph_->graph_captures());
  EXPECT_EQ(eager_->graph_replays(), 0);
  // The counter: a replay counts the graph's nodes, which equal the eager count.
  EXPECT_GT(graph_->kernel_launches(), 0);
}

TEST_P(GpuGraphTest, GrowingContextReusesOneGraph) {
  // The context grows from 1 to 4 blocks: the block-table stride bucket (8) covers them all,
  // so one graph serves every step (the attention grid is sized for the bucket).
  std::vector<int32_t> cached{0, 0};
  const std::vector<int32_t> prompt = tokens(15, 3);
  both(BatchPlan{{make_step(0, 0, prompt, blocks(0), 1)}}, "prompt");
  cached[0] = 15;
  for (int step = 0; step < 40; ++step) {
    both(BatchPlan{{make_step(0, cached[0]++, tokens(1, 300 + step), blocks(0), 1)}}, "decode " + std::to_string(step));
  }
  EXPECT_EQ(graph_->graph_captures(), 1);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuGraphTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return std::string(i.param ? "moe" : "dense"); });

}  // namespace
}  // namespace deltaserve::runtime
