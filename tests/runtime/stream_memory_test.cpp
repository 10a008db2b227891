// --max-streams 0 sizes the slots from memory: the bytes a stream takes (runtime/stream_memory.h)
// must be what the CPU backend really allocates per slot, and the slot count must follow the
// memory left after the reservations, within [1, cap].
#include <gtest/gtest.h>

#include <memory>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_preset.h"
#include "runtime/stream_memory.h"
#include "runtime/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

// A stream's bytes are the difference the CPU backend shows between 2 and 5 slots (with 3
// KV blocks each), with and without speculation's two state banks, with and without the MTP head.
TEST(StreamMemory, StreamBytesEqualTheCpuBackendsPerSlotAllocation) {
  for (const char* preset : {"tiny-moe", "tiny-dense"}) {
    for (bool mtp : {false, true}) {
      ModelConfig config = find_preset(preset).config;
      if (!mtp) config.num_mtp_layers = 0;
      const std::unique_ptr<LoadedModel> model = make_synthetic_model(config, kernels::DType::F32, 5, 1);
      for (int32_t verify_rows : {1, 4}) {
        constexpr int32_t kBlocksPerStream = 3;
        auto held = [&](int32_t slots) {
          const CacheConfig cache{slots, 16, slots * kBlocksPerStream, verify_rows};
          const CpuBackend backend(*model, cache, 1);
          return backend.kv_cache_bytes() + backend.state_bytes();
        };
        const CacheConfig cache{1, 16, kBlocksPerStream, verify_rows};
        const StreamBytes stream = stream_bytes(model->config, model->weights.has_mtp, cache, kBlocksPerStream, false);
        EXPECT_GT(stream.state, 0);
        EXPECT_GT(stream.kv, 0);
        EXPECT_EQ(stream.total() * 3, held(5) - held(2)) << preset << " mtp " << mtp << " verify rows " << verify_rows;
      }
    }
  }
}

TEST(StreamMemory, Bf16StatesHalveTheDeltaStateOnTheGpuOnly) {
  const ModelConfig config = find_preset("qwen3.6-35b-a3b").config;
  CacheConfig cache{1, 16, 256, 4};
  const StreamBytes f32 = stream_bytes(config, true, cache, 256, true);
  cache.state_precision = StatePrecision::kBf16;
  const StreamBytes bf16 = stream_bytes(config, true, cache, 256, true);
  const StreamBytes cpu = stream_bytes(config, true, cache, 256, false);
  EXPECT_EQ(bf16.kv, f32.kv);
  EXPECT_LT(bf16.state, f32.state);
  EXPECT_GT(bf16.state * 2, f32.state);  // the conv windows stay f32
  EXPECT_EQ(cpu.state, f32.state);
}

TEST(StreamMemory, SlotsFollowTheMemoryLeftWithinOneAndTheCap) {
  constexpr int64_t GiB = int64_t{1} << 30;
  // 100 GiB free, 20 reserved + a tenth of the free memory as headroom: 70 GiB for 1-GiB streams.
  SlotSizing s = size_slots(100 * GiB, 20 * GiB, GiB, 256);
  EXPECT_EQ(s.slots, 70);
  EXPECT_EQ(s.reserved_bytes, 30 * GiB);
  EXPECT_EQ(size_slots(100 * GiB, 20 * GiB, GiB, 31).slots, 31);
  EXPECT_EQ(size_slots(10 * GiB, 20 * GiB, GiB, 256).slots, 1);  // never zero: admission still works
  EXPECT_EQ(size_slots(0, 0, GiB, 256).slots, 1);                // unreadable memory
  EXPECT_NE(s.describe().find("70 streams"), std::string::npos) << s.describe();
}

TEST(StreamMemory, HostAvailableBytesAreReadOnLinux) {
  EXPECT_GT(host_available_bytes(), int64_t{1} << 20);
}

}  // namespace
}  // namespace deltaserve::runtime
