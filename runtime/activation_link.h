// The hop of a layer split (runtime/layer_split_backend.h): the hidden activations of a step,
// [rows][H] f32, leave one device's last layer and enter the next device's first layer. A link
// owns the way they cross and counts what crossed. Called on the engine thread only.
//
// HostStagedLink (CPU devices, and the fallback shape of a GPU link): source -> a staging
// buffer the link owns -> destination, two copies, as a GPU pair without peer access copies
// through page-locked host memory. A GPU link (waits for a two-GPU host) keeps this interface:
// a peer copy (cudaMemcpyPeerAsync / hipMemcpyPeerAsync) where the devices allow it, else the
// staged copy through a pinned buffer, both enqueued on the receiving device's stream after an
// event of the sending one, so no host synchronisation sits between the devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/device_split.h"

namespace deltaserve::runtime {

// One device's activation buffer: `bytes` at `data` in the memory of `device` (host memory
// for a CPU device).
struct ActivationBuffer {
  void* data = nullptr;
  int64_t bytes = 0;
  DeviceId device;
};

// Cumulative since the link was made.
struct LinkStats {
  uint64_t copies = 0;          // hops (one per forward step)
  uint64_t bytes = 0;           // activation bytes that crossed (each counted once)
  double seconds = 0.0;         // wall time of the hops, staging included
  int64_t staging_bytes = 0;    // bytes of the staging buffer held now (flat once the largest step ran)
};

class ActivationLink {
 public:
  virtual ~ActivationLink() = default;
  // Copies src into dst (same size; throws std::invalid_argument otherwise). When it
  // returns, the receiving device's next work reads the copied activations.
  virtual void copy(const ActivationBuffer& src, const ActivationBuffer& dst) = 0;
  virtual LinkStats stats() const = 0;
};

// Two host copies through a staging buffer of the link's own (grown to the largest step, then
// reused): the CPU devices' link, the code path a GPU pair without peer access takes.
class HostStagedLink final : public ActivationLink {
 public:
  void copy(const ActivationBuffer& src, const ActivationBuffer& dst) override;
  LinkStats stats() const override;

 private:
  std::vector<std::byte> staging_;
  LinkStats stats_;
};

}  // namespace deltaserve::runtime
