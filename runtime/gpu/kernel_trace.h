// KernelTrace: device time and launches of the GPU backend per kernel class, the table of
// `deltaserve bench decode|prefill --trace` (which kernel class to optimise next).
//
// When enabled (GpuBackend::set_trace), DS_GPU_LAUNCH (gpu_layers.h) records an event pair on
// the launch's stream around each launch, with the launch's kernel class (from its shape
// format, kernel_class()) and kernel count; take() waits for the stream and adds each pair's
// elapsed time into per-class totals. A pair measures the device time from the moment the
// device reaches the first event to the second: the launched kernels, plus the launch latency
// when the device had run dry waiting for the host (eager launches of small kernels). The
// backend runs eagerly while tracing (no step graphs), so the totals are eager per-kernel
// times; compare their sum with the untraced step time.
//
// Events: a pool of pairs created at enable(), reused after every take(); it grows (by
// doubling) only when more launches are recorded between two takes than the pool holds, so
// after the first traced forward of the largest shape no launch allocates. Taking after every
// forward keeps the pool at one forward's launches.
//
// Owner: GpuBackend (engine thread); not thread-safe. Events are created on the device current
// at enable() and destroyed by disable() or the destructor; take() blocks on the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/gpu/gpu_compat.h"
#include "runtime/gpu/kernel_class_time.h"

namespace deltaserve::runtime::gpu {

enum class KernelClass : int {
  kEmbedding,
  kMatmulMatvec,      // matmul_gpu and grouped projection segments (decode/verify rows)
  kMatmulTiled,       // matmul_prefill_gpu (prefill chunks)
  kMoeRouter,         // moe_router_gpu (router, shared gate, top-k); router segments, moe_route_gpu
  kMoeExpertsMatvec,  // expert (+ shared expert) gate*up and down segments
  kMoeExpertsTiled,   // matmul_experts_prefill_gpu
  kMoeCombine,
  kMoeDownCombine,    // moe_down_combine_gpu (staged matvec: expert and shared down + combine)
  kGdnStep,
  kGdnPrefill,
  kAttentionPaged,
  kAttentionPrefill,
  kNorms,             // rms_norm, q/k norms, gated rms_norm
  kRopeKv,            // rope q/k, kv_append
  kElementwise,       // swiglu
  kLmHead,            // the LM head matmul (output.weight, or token_embd when tied)
  kGather,            // hidden / logit row gathers of the head
  kArgmax,            // greedy argmax ids and sampled rows' draws (draw_gpu)
  kOther,             // a format this table does not know yet (see kernel_class)
};
inline constexpr int kNumKernelClasses = static_cast<int>(KernelClass::kOther) + 1;

// The class of a DS_GPU_LAUNCH from its shape format (a literal that starts with the op name)
// and the format's first argument when the first conversion is "%s" (a weight name or a
// segment group such as "moe down"; null otherwise).
KernelClass kernel_class(const char* format, const char* first_arg);
const char* kernel_class_name(KernelClass c);

class KernelTrace {
 public:
  // Event pairs created by enable().
  static constexpr size_t kInitialPairs = 1024;

  KernelTrace() = default;
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  bool enabled() const { return enabled_; }
  // Creates the pool (on the current device); a no-op when already enabled.
  void enable();
  // Drops unread records and destroys the pool. The caller synchronises the stream first.
  void disable();

  // DS_GPU_LAUNCH's hooks: begin() before the launch call with DS_GPU_CHECK's format and
  // arguments, end() after it with the call's kernel count. Both record one event on stream.
  void begin(gpuStream_t stream, const char* format, ...);
  void end(gpuStream_t stream, int64_t num_kernels);

  // Synchronises stream, returns the totals of the classes launched since the last take (in
  // KernelClass order) and makes the pool free again.
  std::vector<KernelClassTime> take(gpuStream_t stream);

  size_t num_pairs() const { return start_.size(); }
  size_t num_pending() const { return records_.size(); }

 private:
  struct Record {
    KernelClass kernel_class = KernelClass::kOther;
    int64_t num_kernels = 0;
  };
  void grow(size_t num_pairs);
  void destroy_events();

  bool enabled_ = false;
  std::vector<gpuEvent_t> start_, stop_;  // pair i brackets records_[i]
  std::vector<Record> records_;           // capacity kept equal to the pool
};

}  // namespace deltaserve::runtime::gpu
