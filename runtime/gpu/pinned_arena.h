// THE page-locked host staging arena of a GPU backend: one allocation, made at start and
// reused by every step, released at shutdown. Each step lays its host->device index arrays
// (and the MTP hidden inputs) into the input region and receives its logit/hidden rows in
// the output region. Bytes and registrations are counted for metrics; they never change
// after construction (registrations() is 1 while the arena lives).
// Owner: GpuBackend; engine thread only. Reuse is safe because every forward synchronises its
// stream before returning, so no copy from a previous step is still in flight.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltaserve::runtime::gpu {

class PinnedArena {
 public:
  // One gpuMallocHost of input_bytes + output_bytes (each rounded to 256). Throws
  // std::runtime_error when the host cannot lock that much.
  PinnedArena(size_t input_bytes, size_t output_bytes);
  ~PinnedArena();
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;

  unsigned char* input() const { return base_; }
  size_t input_bytes() const { return input_bytes_; }
  float* output() const { return reinterpret_cast<float*>(base_ + input_bytes_); }
  size_t output_bytes() const { return output_bytes_; }

  int64_t bytes() const { return static_cast<int64_t>(input_bytes_ + output_bytes_); }
  int64_t registrations() const { return base_ != nullptr ? 1 : 0; }

 private:
  size_t input_bytes_ = 0;
  size_t output_bytes_ = 0;
  unsigned char* base_ = nullptr;
};

// Bump layout of one step's arrays inside the input region (16-byte aligned pieces). The
// device mirror has the same layout, so one copy of [0, used_bytes()) moves them all.
class StagingLayout {
 public:
  StagingLayout(unsigned char* host, size_t capacity_bytes) : host_(host), capacity_(capacity_bytes) {}
  void clear() { used_ = 0; }
  // Returns the offset of a new piece of count elements; throws std::logic_error on overflow
  // (the plan checks bound every count, so this is an internal error).
  template <class T>
  size_t push(int64_t count) {
    return push_bytes(static_cast<size_t>(count) * sizeof(T));
  }
  template <class T>
  T* host(size_t offset) const {
    return reinterpret_cast<T*>(host_ + offset);
  }
  size_t used_bytes() const { return used_; }

 private:
  size_t push_bytes(size_t bytes);
  unsigned char* host_;
  size_t capacity_;
  size_t used_ = 0;
};

}  // namespace deltaserve::runtime::gpu
