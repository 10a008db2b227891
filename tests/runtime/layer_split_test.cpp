// A layer split over CPU "devices" (runtime/layer_split_backend.h) against one CpuBackend, on
// both tiny architectures: every step's logits, greedy ids and hidden rows are bitwise the
// same, through prefill, decode, verify rows with rollback, the MTP head, prefix-cache
// checkpoints (save, spill, restore, KV block copies) and a slot reset mid-generation; the
// activation hop copies exactly the step's rows; ranges are balanced, uneven or overridden;
// bad ranges are refused with a readable line.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/layer_split_backend.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {
namespace {

constexpr int kThreads = 2;

CacheConfig test_cache() { return CacheConfig{4, 16, 32, 4}; }

std::vector<int32_t> tokens_from(int32_t seed, int32_t count, int64_t vocab) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < count; ++i) t.push_back(static_cast<int32_t>((seed * 31 + i * 17 + 3) % vocab));
  return t;
}

void expect_same(const ForwardOutput& one, const ForwardOutput& split, const std::string& where) {
  ASSERT_EQ(one.num_rows, split.num_rows) << where;
  EXPECT_EQ(one.argmax_ids, split.argmax_ids) << where;
  ASSERT_EQ(one.logits.size(), split.logits.size()) << where;
  ASSERT_EQ(one.hidden.size(), split.hidden.size()) << where;
  EXPECT_EQ(0, std::memcmp(one.logits.data(), split.logits.data(), one.logits.size() * sizeof(float)))
      << where << ": logits differ";
  EXPECT_EQ(0, std::memcmp(one.hidden.data(), split.hidden.data(), one.hidden.size() * sizeof(float)))
      << where << ": hidden rows differ";
}

// Runs one scenario on both backends, comparing after every call.
class Twin {
 public:
  Twin(Backend& one, Backend& split) : one_(one), split_(split) {}
  void forward(const BatchPlan& plan, const std::string& where) {
    one_.forward(plan, out_one_);
    split_.forward(plan, out_split_);
    expect_same(out_one_, out_split_, where);
    rows_ += plan.num_rows();
  }
  void forward_mtp(const MtpPlan& plan, const std::string& where) {
    ForwardOutput a, b;
    one_.forward_mtp(plan, a);
    split_.forward_mtp(plan, b);
    expect_same(a, b, where);
  }
  void rollback(int32_t slot, int32_t kept) {
    one_.rollback(slot, kept);
    split_.rollback(slot, kept);
  }
  void apply(const std::vector<CacheOp>& ops) {
    one_.apply_cache_ops(ops);
    split_.apply_cache_ops(ops);
  }
  const ForwardOutput& last() const { return out_one_; }
  int64_t rows() const { return rows_; }

 private:
  Backend& one_;
  Backend& split_;
  ForwardOutput out_one_, out_split_;
  int64_t rows_ = 0;
};

SequenceStep step(int32_t slot, int32_t cached, std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                  int32_t logits = 1, bool verify = false) {
  SequenceStep s;
  s.slot = slot;
  s.num_cached_tokens = cached;
  s.tokens = std::move(tokens);
  s.kv_blocks = std::move(blocks);
  s.num_logits = logits;
  s.num_hidden = logits;
  s.keep_row_states = verify;
  return s;
}

// The scenario: two prompts, decode and verify steps with rollback, MTP drafts from the trunk's
// hidden rows, a checkpoint saved, spilled and restored into a third slot over copied KV
// blocks, and slot 0 reset mid-generation (a preempted sequence recomputed from scratch).
void run_scenario(const LoadedModel& model, LayerSplitBackend& split) {
  CpuBackend one(model, split.cache_config(), kThreads);
  const int64_t vocab = model.config.num_vocab, h = model.config.num_embd;
  one.reserve_checkpoints(1, 1);
  split.reserve_checkpoints(1, 1);
  Twin twin(one, split);

  const std::vector<int32_t> prompt0 = tokens_from(1, 20, vocab), prompt1 = tokens_from(2, 9, vocab);
  twin.forward({{step(0, 0, prompt0, {0, 1}), step(1, 0, prompt1, {2})}}, "prefill");
  twin.apply({CacheOp::save(0, {CheckpointTier::kDevice, 0}),
              CacheOp::move({CheckpointTier::kDevice, 0}, {CheckpointTier::kHost, 0}), CacheOp::copy_block(0, 5),
              CacheOp::copy_block(1, 6)});

  // Slot 0 decodes; slot 1 verifies 4 rows and keeps 2 of them, then 3 and keeps 1.
  twin.forward({{step(0, 20, {7}, {0, 1}), step(1, 9, tokens_from(3, 4, vocab), {2}, 4, true)}}, "verify 4");
  twin.rollback(1, 2);
  twin.forward({{step(1, 11, tokens_from(4, 3, vocab), {2}, 3, true)}}, "verify 3 after rollback");
  twin.rollback(1, 1);
  twin.forward({{step(1, 12, {11}, {2})}}, "decode after rollback");

  if (model.weights.has_mtp) {
    MtpPlan mtp;
    MtpSequenceStep& s = mtp.sequences.emplace_back();
    s.num_cached_rows = 0;
    s.tokens = {static_cast<int32_t>(twin.last().argmax_ids[0])};
    s.hidden.assign(twin.last().hidden.begin(), twin.last().hidden.begin() + h);
    s.kv_blocks = {3};
    twin.forward_mtp(mtp, "MTP head");
  }

  // A prefix-cache hit: slot 2 resumes from slot 0's checkpoint after 20 tokens, over copies
  // of its KV blocks; slot 0 is reset and recomputes a different prompt mid-generation.
  twin.apply({CacheOp::restore({CheckpointTier::kHost, 0}, 2)});
  twin.forward({{step(2, 20, tokens_from(5, 6, vocab), {5, 6}), step(0, 0, tokens_from(6, 12, vocab), {7}),
                 step(1, 13, {13}, {2})}},
               "restore + reset");
  twin.forward({{step(2, 26, {17}, {5, 6}), step(0, 12, {19}, {7}), step(1, 14, {23}, {2})}}, "decode after reset");

  // The hop carried every row of every step once per device boundary, [rows][H] f32.
  const std::vector<SplitDeviceStats> stats = split.split_stats();
  ASSERT_EQ(stats.size(), split.stages().size());
  EXPECT_EQ(stats.front().inbound.copies, 0u);
  for (size_t d = 1; d < stats.size(); ++d) {
    EXPECT_EQ(stats[d].inbound.copies, 6u) << "device " << d;
    EXPECT_EQ(stats[d].inbound.bytes, static_cast<uint64_t>(twin.rows() * h * 4)) << "device " << d;
    EXPECT_GT(stats[d].bytes_used, 0);
  }
}

class LayerSplitTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { model_ = load_model(GetParam()); }
  int32_t num_layers() const { return static_cast<int32_t>(model_->config.num_layers); }
  std::unique_ptr<LayerSplitBackend> split(std::vector<LayerRange> ranges, size_t num_devices = 2) {
    std::vector<DeviceId> devices;
    for (size_t d = 0; d < num_devices; ++d) devices.push_back({DeviceKind::kCpu, static_cast<int32_t>(d)});
    return make_cpu_layer_split(devices, std::move(ranges), *model_, test_cache(), kThreads);
  }
  std::unique_ptr<LoadedModel> model_;
};

TEST_P(LayerSplitTest, BalancedSplitOverTwoDevicesIsBitwiseOneDevice) {
  const std::unique_ptr<LayerSplitBackend> backend = split({});
  ASSERT_EQ(backend->stages().size(), 2u);
  EXPECT_EQ(backend->stages()[0]->layer_range().first, 0);
  EXPECT_EQ(backend->stages()[1]->layer_range().end, num_layers());
  run_scenario(*model_, *backend);
}

TEST_P(LayerSplitTest, OneLayerOnTheFirstDeviceIsBitwiseOneDevice) {
  run_scenario(*model_, *split({{0, 1}, {1, num_layers()}}));
}

TEST_P(LayerSplitTest, OneLayerOnTheLastDeviceIsBitwiseOneDevice) {
  run_scenario(*model_, *split({{0, num_layers() - 1}, {num_layers() - 1, num_layers()}}));
}

TEST_P(LayerSplitTest, ThreeDevicesAreBitwiseOneDevice) {
  ASSERT_GE(num_layers(), 3);
  run_scenario(*model_, *split({}, 3));
}

TEST_P(LayerSplitTest, EachDeviceHoldsOnlyItsLayersStates) {
  const std::unique_ptr<LayerSplitBackend> backend = split({{0, 1}, {1, num_layers()}});
  CpuBackend one(*model_, test_cache(), kThreads);
  int64_t state = 0, kv = 0, checkpoint = 0;
  for (const auto& stage : backend->stages()) {
    const auto& cpu = dynamic_cast<const CpuBackend&>(*stage);
    state += cpu.state_bytes();
    kv += cpu.kv_cache_bytes();
    checkpoint += cpu.checkpoint_bytes();
  }
  EXPECT_EQ(state, one.state_bytes());
  EXPECT_EQ(kv, one.kv_cache_bytes());
  EXPECT_EQ(checkpoint, one.checkpoint_bytes());
  EXPECT_EQ(backend->checkpoint_bytes(), one.checkpoint_bytes());
  // The first device's one layer is a GDN layer: its share is one layer's state, no KV pool.
  ASSERT_EQ(model_->config.layer_kinds[0], LayerKind::GatedDeltaNet);
  const auto& first = dynamic_cast<const CpuBackend&>(*backend->stages()[0]);
  EXPECT_EQ(first.state_bytes() * model_->config.num_gdn_layers(), one.state_bytes());
  EXPECT_EQ(first.kv_cache_bytes(), 0);
  // The MTP head lives on the last device only.
  MtpPlan mtp;
  ForwardOutput out;
  EXPECT_THROW(backend->stages()[0]->forward_mtp(mtp, out), std::logic_error);
}

TEST_P(LayerSplitTest, RangesThatDoNotTileTheModelAreRefused) {
  const int32_t l = num_layers();
  auto message = [&](std::vector<LayerRange> ranges) -> std::string {
    try {
      split(std::move(ranges));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({{0, 1}, {2, l}}).find("expected a non-empty range from layer 1"), std::string::npos);
  EXPECT_NE(message({{0, 1}, {1, l - 1}}).find("hold layers 0-" + std::to_string(l - 2) + " of " + std::to_string(l)),
            std::string::npos);
  EXPECT_NE(message({{0, 0}, {0, l}}).find("not a non-empty range"), std::string::npos);
  EXPECT_NE(message({{0, 1}, {1, l + 1}}).find("not a non-empty range"), std::string::npos);
  EXPECT_NE(message({{0, l}}).find("one layer range per device"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, LayerSplitTest,
                         ::testing::Values("tests/fixtures/tiny_dense/model-f32.gguf",
                                           "tests/fixtures/tiny_moe/model-f32.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.index == 0 ? "Dense" : "Moe");
                         });

}  // namespace
}  // namespace deltaserve::runtime
