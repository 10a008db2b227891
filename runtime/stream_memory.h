#pragma once
// How many streams fit in memory: the bytes one stream's state slot and KV blocks take, from
// the formulas the backends size their pools with (runtime/cpu/cpu_backend.cpp, GpuBackend::
// size_buffers), and the slot count `--max-streams 0` derives from the memory left after the
// weights, the prefix cache's budgets and a headroom for workspaces.
#include <cstdint>
#include <string>

#include "runtime/backend.h"
#include "runtime/model_config.h"

namespace deltaserve::runtime {

// Bytes one stream holds in a backend's pools.
struct StreamBytes {
  int64_t state = 0;  // recurrent-state slot: every GDN layer's delta state and conv window, rings included
  int64_t kv = 0;     // KV blocks for the whole context, every attention layer and the MTP block's
  int64_t total() const { return state + kv; }
};

// A stream of a model whose verify rows, state precision and KV geometry are the CacheConfig's,
// holding kv_blocks_per_stream blocks. The CPU backend keeps delta states in f32 whatever the
// precision (the GPU backend alone stores bf16).
StreamBytes stream_bytes(const ModelConfig& config, bool has_mtp, const CacheConfig& cache, int32_t kv_blocks_per_stream,
                         bool gpu);

// What the slot count was derived from, for the start-up log.
struct SlotSizing {
  int64_t available_bytes = 0;  // the device's free memory (host: MemAvailable)
  int64_t reserved_bytes = 0;   // weights still to be placed, cache budgets, headroom
  int64_t stream_bytes = 0;     // StreamBytes::total()
  int32_t cap = 0;              // the most slots allowed whatever the memory
  int32_t slots = 0;            // min(cap, (available - reserved) / stream_bytes), at least 1
  std::string describe() const;
};

// The slot count from memory: as many streams as (available - reserved) holds, at least one,
// at most cap. reserved includes a headroom of a tenth of available for the workspaces, which
// grow with the step's rows rather than with the slots.
SlotSizing size_slots(int64_t available_bytes, int64_t reserved_bytes, int64_t stream_bytes, int32_t cap);

// The host's MemAvailable (/proc/meminfo) in bytes; 0 when it cannot be read.
int64_t host_available_bytes();

}  // namespace deltaserve::runtime
