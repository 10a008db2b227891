// `bench decode --sampled-streams N [--constrained]`: the host-side sampling cost of decode.
// The first N streams of every step bring their logit row to the host and draw a token from
// it with the CPU sampler at temperature 1 (as a sampled serving request does); with
// --constrained each of them also carries a JSON-object constraint (runtime/grammar), so the
// step pays the grammar's token mask too. The vocabulary is synthetic (byte tokens, then
// pseudo-random text-like pieces of 2-8 bytes), sized to the model's; drawn tokens advance
// the constraint but are not fed back (the plans' ids stay the bench's own). The streams draw
// side by side on as many threads as the daemon's runner uses (BackendRunner).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/batch_plan.h"
#include "runtime/sampler.h"
#include "runtime/thread_pool.h"

namespace deltaserve::cli {

class BenchSamplers {
 public:
  BenchSamplers(int64_t num_vocab, int32_t num_streams, bool constrained, uint64_t seed);
  // Draws one token for each of the first num_streams plan sequences (their first logit
  // row, which must be on the host). Returns the wall time in ms.
  double sample(const runtime::ForwardOutput& out);
  int32_t num_streams() const { return static_cast<int32_t>(samplers_.size()); }
  // Masks the constraints computed and served from their cache (0 when unconstrained).
  int64_t num_masks_computed() const;
  int64_t num_masks_cached() const;

 private:
  std::vector<std::unique_ptr<runtime::Sampler>> samplers_;
  std::vector<std::shared_ptr<const runtime::grammar::Constraint>> constraints_;
  runtime::ThreadPool pool_;
};

}  // namespace deltaserve::cli
