// Sequences are independent inside a plan, and chunked prefill equals one whole prefill:
// the properties continuous batching and greedy-equality under load rest on.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "tests/model/fixture.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::relative_max_diff;

class BatchingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string path = (deltaserve::testing::fixture_dir(GetParam()) / "model-f32.gguf").string();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture not generated: " << path;
    model_ = load_model(path);
    tokens_ = deltaserve::testing::read_reference(GetParam()).at("tokens").get<std::vector<int32_t>>();
  }

  // Blocks [first, first + 8) for one sequence: 128 positions.
  static std::vector<int32_t> blocks(int32_t first) {
    std::vector<int32_t> b(8);
    std::iota(b.begin(), b.end(), first);
    return b;
  }

  // Runs prompt[0:n) through a fresh slot in chunks of chunk tokens; returns last logits.
  std::vector<float> prefill_in_chunks(CpuBackend& backend, int32_t slot, int64_t n, int64_t chunk) {
    ForwardOutput out;
    for (int64_t done = 0; done < n; done += chunk) {
      SequenceStep s;
      s.slot = slot;
      s.num_cached_tokens = static_cast<int32_t>(done);
      const int64_t end = std::min(n, done + chunk);
      s.tokens.assign(tokens_.begin() + done, tokens_.begin() + end);
      s.kv_blocks = blocks(slot * 8);
      s.num_logits = end == n ? 1 : 0;
      backend.forward(BatchPlan{{s}}, out);
    }
    return out.logits;
  }

  std::unique_ptr<LoadedModel> model_;
  std::vector<int32_t> tokens_;
};

TEST_P(BatchingTest, ChunkedPrefillEqualsWholePrefill) {
  const ModelConfig& c = model_->config;
  CpuBackend backend(*model_, CacheConfig{4, 16, 32}, 2);
  const std::vector<float> whole = prefill_in_chunks(backend, 0, 64, 64);
  for (int64_t chunk : {1, 7, 64}) {
    const int32_t slot = 1;
    const std::vector<float> chunked = prefill_in_chunks(backend, slot, 64, chunk);
    EXPECT_LE(relative_max_diff(chunked.data(), whole.data(), whole.size()), 1e-5) << "chunk " << chunk;
    for (int g = 0; g < static_cast<int>(c.num_gdn_layers()); ++g) {
      const size_t state = static_cast<size_t>(c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim);
      EXPECT_LE(relative_max_diff(backend.delta_state(g, slot), backend.delta_state(g, 0), state), 1e-5)
          << "chunk " << chunk << " GDN layer " << g;
      const size_t conv = static_cast<size_t>((c.conv_kernel - 1) * c.conv_channels());
      EXPECT_LE(relative_max_diff(backend.conv_state(g, slot), backend.conv_state(g, 0), conv), 1e-6);
    }
  }
}

// One plan mixing A (prefilling in chunks) with B and C (decoding) gives each the logits it
// gets alone.
TEST_P(BatchingTest, MixedPlanEqualsEachSequenceAlone) {
  CpuBackend alone(*model_, CacheConfig{4, 16, 32}, 2);
  CpuBackend mixed(*model_, CacheConfig{4, 16, 32}, 2);
  // B and C: prompts of 20 and 33 tokens from different offsets, already prefilled.
  auto prefill_other = [&](CpuBackend& backend, int32_t slot, int64_t offset, int64_t n) {
    SequenceStep s;
    s.slot = slot;
    s.tokens.assign(tokens_.begin() + offset, tokens_.begin() + offset + n);
    s.kv_blocks = blocks(slot * 8);
    ForwardOutput out;
    backend.forward(BatchPlan{{s}}, out);
  };
  for (CpuBackend* backend : {&alone, &mixed}) {
    prefill_other(*backend, 1, 10, 20);
    prefill_other(*backend, 2, 30, 33);
  }
  int32_t cached_b = 20, cached_c = 33;
  int64_t a_done = 0;
  for (int step = 0; step < 6; ++step) {
    SequenceStep a, b, c;
    a.slot = 0;
    a.num_cached_tokens = static_cast<int32_t>(a_done);
    a.tokens.assign(tokens_.begin() + a_done, tokens_.begin() + a_done + 9);
    a.kv_blocks = blocks(0);
    a.num_logits = 2;
    b.slot = 1;
    b.num_cached_tokens = cached_b;
    b.tokens = {tokens_[static_cast<size_t>(40 + step)]};
    b.kv_blocks = blocks(8);
    c.slot = 2;
    c.num_cached_tokens = cached_c;
    c.tokens = {tokens_[static_cast<size_t>(50 + step)]};
    c.kv_blocks = blocks(16);
    ForwardOutput together;
    mixed.forward(BatchPlan{{b, a, c}}, together);
    ASSERT_EQ(together.num_rows, 4);
    const int64_t v = together.num_vocab;
    ForwardOutput out_a, out_b, out_c;
    alone.forward(BatchPlan{{a}}, out_a);
    alone.forward(BatchPlan{{b}}, out_b);
    alone.forward(BatchPlan{{c}}, out_c);
    EXPECT_LE(relative_max_diff(together.row_logits(0), out_b.row_logits(0), static_cast<size_t>(v)), 1e-5);
    EXPECT_LE(relative_max_diff(together.row_logits(1), out_a.row_logits(0), static_cast<size_t>(2 * v)), 1e-5);
    EXPECT_LE(relative_max_diff(together.row_logits(3), out_c.row_logits(0), static_cast<size_t>(v)), 1e-5);
    a_done += 9;
    ++cached_b;
    ++cached_c;
  }
}

TEST_P(BatchingTest, BadPlansAreRejectedNotExecuted) {
  CpuBackend backend(*model_, CacheConfig{2, 16, 8}, 1);
  ForwardOutput out;
  SequenceStep s;
  s.tokens = {1, 2, 3};
  s.kv_blocks = {0};
  s.slot = 2;
  EXPECT_THROW(backend.forward(BatchPlan{{s}}, out), std::invalid_argument);
  s.slot = 0;
  s.kv_blocks = {8};
  EXPECT_THROW(backend.forward(BatchPlan{{s}}, out), std::invalid_argument);
  s.kv_blocks = {0};
  s.num_cached_tokens = 15;  // positions 15..17 need two blocks
  EXPECT_THROW(backend.forward(BatchPlan{{s}}, out), std::invalid_argument);
  s.num_cached_tokens = 0;
  s.tokens = {static_cast<int32_t>(model_->config.num_vocab)};
  EXPECT_THROW(backend.forward(BatchPlan{{s}}, out), std::invalid_argument);
  s.tokens = {1};
  SequenceStep twin = s;
  EXPECT_THROW(backend.forward(BatchPlan{{s, twin}}, out), std::invalid_argument);
}

// Verify rows keep every row's state; rollback(slot, k) leaves the slot exactly where decoding
// the first k of those rows one by one leaves it (states and the next step's logits), for
// every k and over two verify rounds in a row (the ring's two banks alternate), and a
// sequence started on a slot after a verify step starts from a zero state.
TEST_P(BatchingTest, VerifyThenRollbackEqualsDecodingTheKeptRows) {
  const ModelConfig& c = model_->config;
  const CacheConfig cache{4, 16, 32, 4};
  const size_t delta = static_cast<size_t>(c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim);
  const size_t conv = static_cast<size_t>((c.conv_kernel - 1) * c.conv_channels());
  for (int32_t kept = 1; kept <= 4; ++kept) {
    CpuBackend verify(*model_, cache, 2), serial(*model_, cache, 2);
    prefill_in_chunks(verify, 1, 20, 20);
    prefill_in_chunks(serial, 1, 20, 20);
    int32_t cached = 20;
    ForwardOutput vo, so;
    for (int round = 0; round < 2; ++round) {
      SequenceStep step;
      step.slot = 1;
      step.num_cached_tokens = cached;
      step.tokens.assign(tokens_.begin() + 20 + 4 * round, tokens_.begin() + 24 + 4 * round);
      step.kv_blocks = blocks(8);
      step.num_logits = 4;
      step.keep_row_states = true;
      verify.forward(BatchPlan{{step}}, vo);
      verify.rollback(1, kept);
      for (int32_t i = 0; i < kept; ++i) {
        SequenceStep one = step;
        one.num_cached_tokens = cached + i;
        one.tokens = {step.tokens[static_cast<size_t>(i)]};
        one.num_logits = 1;
        one.keep_row_states = false;
        serial.forward(BatchPlan{{one}}, so);
      }
      cached += kept;
      for (int g = 0; g < static_cast<int>(c.num_gdn_layers()); ++g) {
        EXPECT_LE(relative_max_diff(verify.delta_state(g, 1), serial.delta_state(g, 1), delta), 1e-5)
            << "kept " << kept << " round " << round << " GDN layer " << g;
        EXPECT_LE(relative_max_diff(verify.conv_state(g, 1), serial.conv_state(g, 1), conv), 1e-6);
      }
      SequenceStep next;
      next.slot = 1;
      next.num_cached_tokens = cached;
      next.tokens = {tokens_[40]};
      next.kv_blocks = blocks(8);
      ForwardOutput vn, sn;
      CpuBackend* backends[] = {&verify, &serial};
      ForwardOutput* outs[] = {&vn, &sn};
      for (int b = 0; b < 2; ++b) {
        // Peek at the next step's logits without advancing: a verify step of one row, rolled back.
        SequenceStep peek = next;
        peek.keep_row_states = true;
        backends[b]->forward(BatchPlan{{peek}}, *outs[b]);
        backends[b]->rollback(1, 1);
      }
      EXPECT_LE(relative_max_diff(vn.logits.data(), sn.logits.data(), sn.logits.size()), 1e-5)
          << "kept " << kept << " round " << round;
      // The peek kept its row: both advanced by one position, alike.
      ++cached;
    }
  }
  // A new sequence on a slot whose live state sits in the ring starts from zero.
  CpuBackend used(*model_, cache, 2), fresh(*model_, cache, 2);
  prefill_in_chunks(used, 2, 12, 12);
  SequenceStep step;
  step.slot = 2;
  step.num_cached_tokens = 12;
  step.tokens.assign(tokens_.begin() + 12, tokens_.begin() + 15);
  step.kv_blocks = blocks(16);
  step.num_logits = 3;
  step.keep_row_states = true;
  ForwardOutput out;
  used.forward(BatchPlan{{step}}, out);
  used.rollback(2, 2);
  const std::vector<float> a = prefill_in_chunks(used, 2, 30, 30), b = prefill_in_chunks(fresh, 2, 30, 30);
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchingTest, ::testing::Values("tiny_dense", "tiny_moe"));

}  // namespace
}  // namespace deltaserve::runtime
