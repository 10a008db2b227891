// The in-step launch timeline (kernels/gpu/gpu_timeline.h, runtime/gpu/step_timeline.h): only a
// measuring build (-DDELTASERVE_GPU_TIMELINE=ON) stamps. Asked for in any other build it says
// so and the backend runs as ever; in the measuring build every launch of a forward is stamped
// once, in launch order (the count equals launches_last_forward(), graphs on and off).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/gpu/gpu_timeline.h"
#include "runtime/gpu/step_timeline.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::make_step;
using deltaserve::testing::random_tokens;
namespace timeline = kernels::gpu::timeline;

TEST(StepTimeline, StampsEveryLaunchOnlyInTheMeasuringBuild) {
  const std::unique_ptr<LoadedModel> model = deltaserve::testing::make_synthetic_model(false, kernels::DType::Q4_0, 71);
  CacheConfig cache{2, 16, 8, 4, 0};
  cache.gpu_tuning.timeline = true;
  GpuBackend backend(*model, cache);
  EXPECT_EQ(timeline::enabled(), timeline::built());
  // Prefill, then decode steps (the second and third replay the step graph where graphs are on).
  std::vector<int32_t> cached{0};
  for (int step = 0; step < 4; ++step) {
    const int32_t n = step == 0 ? 9 : 1;
    BatchPlan plan;
    plan.sequences.push_back(make_step(0, cached[0], random_tokens(n, model->config.num_vocab, 5 + step), block_range(0, 4), 1));
    ForwardOutput out;
    backend.forward(plan, out);
    cached[0] += n;
    ASSERT_EQ(out.argmax_ids.size(), 1u);
    if (!timeline::built()) continue;
    unsigned launched = 0;
    const std::vector<timeline::Stamp> stamps = timeline::read(&launched);
    EXPECT_EQ(static_cast<int64_t>(launched), backend.launches_last_forward()) << "step " << step;
    ASSERT_EQ(stamps.size(), launched);
    for (size_t i = 0; i < stamps.size(); ++i) {
      EXPECT_LE(stamps[i].started_ns, stamps[i].released_ns) << "launch " << i;
      if (i > 0) {
        EXPECT_LE(stamps[i - 1].released_ns, stamps[i].released_ns) << "launch " << i << ": out of order";
      }
      EXPECT_GT(stamps[i].grid_x, 0u);
    }
  }
}

}  // namespace
}  // namespace deltaserve::runtime
