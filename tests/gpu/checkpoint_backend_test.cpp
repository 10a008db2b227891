// Prefix-cache checkpoints on the GPU backend (runtime/cache_ops.h, gpu_checkpoints.cpp): a
// slot's state saved after a prompt and restored into another slot (from the device tier, and
// after a move to the pinned host tier), with the partial KV block copied, decodes the same
// tokens with bitwise the same logits as the original slot; the restored delta states equal
// the saved ones; a restore drops a verify ring (the slot's live entry becomes its first).
// Mirrors the CPU backend's behaviour (tests/scheduler/prefix_cache_test.cpp runs it end to end).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::make_step;
using deltaserve::testing::random_tokens;

constexpr int32_t kSlots = 3, kBlocksPerSeq = 4, kDecode = 8;

std::vector<float> all_states(const GpuBackend& b, const LoadedModel& m, int32_t slot) {
  std::vector<float> all;
  for (int g = 0; g < static_cast<int>(m.config.num_gdn_layers()); ++g) {
    const std::vector<float> d = b.read_delta_state(g, slot);
    const std::vector<float> c = b.read_conv_state(g, slot);
    all.insert(all.end(), d.begin(), d.end());
    all.insert(all.end(), c.begin(), c.end());
  }
  return all;
}

// Greedy decode of kDecode tokens in `slot` from position `cached`; returns every logits row.
std::vector<std::vector<float>> decode(GpuBackend& b, int32_t slot, int32_t cached, int32_t first_token,
                                       const std::vector<int32_t>& blocks, std::vector<int32_t>& tokens) {
  std::vector<std::vector<float>> rows;
  ForwardOutput out;
  int32_t token = first_token;
  for (int32_t i = 0; i < kDecode; ++i) {
    BatchPlan p;
    p.sequences.push_back(make_step(slot, cached + i, {token}, blocks, 1));
    b.forward(p, out);
    rows.emplace_back(out.sequence_logits(0), out.sequence_logits(0) + out.num_vocab);
    token = out.argmax_ids[0];
    tokens.push_back(token);
  }
  return rows;
}

class CheckpointBackendTest : public ::testing::TestWithParam<bool> {};

TEST_P(CheckpointBackendTest, RestoredSlotsDecodeBitwiseAsTheOriginal) {
  auto model = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q8_0, 91);
  CacheConfig cache{kSlots, 16, kSlots * kBlocksPerSeq, 1, 0};
  GpuBackend b(*model, cache);
  ASSERT_GT(b.checkpoint_bytes(), 0);
  b.reserve_checkpoints(2, 1);
  const std::vector<int32_t> prompt = random_tokens(37, model->config.num_vocab, 5);  // ends mid-block
  const auto blocks_of = [](int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); };

  ForwardOutput out;
  BatchPlan p;
  p.sequences.push_back(make_step(0, 0, prompt, blocks_of(0), 1));
  b.forward(p, out);
  const int32_t first = out.argmax_ids[0];
  const int32_t P = static_cast<int32_t>(prompt.size());
  const int32_t partial = P / 16;  // the block holding positions [32, 37)
  const CheckpointRef device0{CheckpointTier::kDevice, 0}, device1{CheckpointTier::kDevice, 1};
  const CheckpointRef host0{CheckpointTier::kHost, 0};
  const std::vector<CacheOp> save = {CacheOp::save(0, device0), CacheOp::save(0, device1), CacheOp::move(device1, host0)};
  b.apply_cache_ops(save);
  const std::vector<float> saved = all_states(b, *model, 0);

  // Slots 1 (device tier) and 2 (host tier): shared full blocks of slot 0, a copy of its partial block.
  for (int32_t slot : {1, 2}) {
    const CheckpointRef from = slot == 1 ? device0 : host0;
    std::vector<int32_t> blocks = block_range(0, partial);
    const std::vector<int32_t> own = blocks_of(slot);
    blocks.insert(blocks.end(), own.begin(), own.end() - partial);
    const std::vector<CacheOp> restore = {CacheOp::copy_block(partial, blocks[static_cast<size_t>(partial)]),
                                          CacheOp::restore(from, slot)};
    b.apply_cache_ops(restore);
    EXPECT_EQ(b.state_entry(slot), slot) << "the live entry is the slot's first (one entry a slot here)";
    const std::vector<float> restored = all_states(b, *model, slot);
    ASSERT_EQ(restored.size(), saved.size());
    EXPECT_EQ(std::memcmp(restored.data(), saved.data(), saved.size() * sizeof(float)), 0) << "slot " << slot;
  }
  std::vector<int32_t> t0, t1, t2;
  std::vector<int32_t> blocks1 = block_range(0, partial), blocks2 = block_range(0, partial);
  for (int32_t i = 0; i < kBlocksPerSeq - partial; ++i) {
    blocks1.push_back(kBlocksPerSeq + i);
    blocks2.push_back(2 * kBlocksPerSeq + i);
  }
  const auto rows0 = decode(b, 0, P, first, blocks_of(0), t0);
  const auto rows1 = decode(b, 1, P, first, blocks1, t1);
  const auto rows2 = decode(b, 2, P, first, blocks2, t2);
  EXPECT_EQ(t1, t0);
  EXPECT_EQ(t2, t0);
  for (int32_t i = 0; i < kDecode; ++i) {
    EXPECT_EQ(std::memcmp(rows1[i].data(), rows0[i].data(), rows0[i].size() * sizeof(float)), 0) << "device tier, row " << i;
    EXPECT_EQ(std::memcmp(rows2[i].data(), rows0[i].data(), rows0[i].size() * sizeof(float)), 0) << "host tier, row " << i;
  }
}

TEST_P(CheckpointBackendTest, BadOpsThrowBeforeAnyCopy) {
  auto model = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q8_0, 92);
  GpuBackend b(*model, CacheConfig{kSlots, 16, kSlots * kBlocksPerSeq, 1, 0});
  b.reserve_checkpoints(1, 0);
  EXPECT_THROW(b.apply_cache_ops(std::vector<CacheOp>{CacheOp::save(0, {CheckpointTier::kHost, 0})}), std::invalid_argument);
  EXPECT_THROW(b.apply_cache_ops(std::vector<CacheOp>{CacheOp::restore({CheckpointTier::kDevice, 1}, 0)}), std::invalid_argument);
  EXPECT_THROW(b.apply_cache_ops(std::vector<CacheOp>{CacheOp::copy_block(0, kSlots * kBlocksPerSeq)}), std::invalid_argument);
  EXPECT_THROW(b.reserve_checkpoints(1, 0), std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, CheckpointBackendTest, ::testing::Bool());

}  // namespace
}  // namespace deltaserve::runtime
