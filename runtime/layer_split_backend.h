// One model split by layers over several devices (`--devices cpu:0,cpu:1 --split layers`):
// a Backend that owns one stage backend per device, each restricted to a contiguous range of
// trunk layers (Backend::layer_range), and an ActivationLink between each pair of neighbours.
//
// A step runs the plan's rows through the stages in device order: the first embeds the tokens
// and runs its layers, its output activations cross the link into the next stage's input
// buffer, and so on; the last stage applies the final norm and LM head and fills the
// ForwardOutput. The MTP head runs on the last stage. Every stage gets the same plan, so each
// does its own slot bookkeeping (resets of fresh sequences, verify rows, rollback by index) for
// the GDN states and KV blocks of its own layers; cache operations (prefix-cache checkpoints,
// KV block copies) go to every stage, each copying its own share. Results are bitwise those of
// one device: the same operations in the same order on the same inputs, only the residual
// stream is copied between the layers of two devices.
//
// Owned and called by one engine thread, as every Backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/activation_link.h"
#include "runtime/backend.h"
#include "runtime/device_split.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

class LayerSplitBackend final : public Backend {
 public:
  // stages[d] runs on devices[d]; their layer ranges must tile [0, num_layers) in order and
  // their cache configs agree; links[d] carries stage d's output into stage d + 1 (one fewer
  // link than stages). Throws std::invalid_argument otherwise.
  LayerSplitBackend(std::vector<std::unique_ptr<Backend>> stages, std::vector<DeviceId> devices,
                    std::vector<std::unique_ptr<ActivationLink>> links);

  // "cpu:0[0-2],cpu:1[3-5]".
  std::string name() const override;
  std::string speed_settings() const override { return stages_.back()->speed_settings(); }
  const ModelConfig& config() const override { return stages_.front()->config(); }
  const CacheConfig& cache_config() const override { return stages_.front()->cache_config(); }
  void forward(const BatchPlan& plan, ForwardOutput& out) override;
  void forward_mtp(const MtpPlan& plan, ForwardOutput& out) override;
  void rollback(int32_t slot, int32_t num_rows_kept) override;
  // Memory of every device together (per device: split_stats).
  BackendMemoryStats memory_stats() const override;
  int32_t prefill_chunk_align() const override;
  // A checkpoint is every stage's share of a slot's recurrent state; each stage keeps its own.
  int64_t checkpoint_bytes() const override;
  void reserve_checkpoints(int32_t num_device, int32_t num_host) override;
  void apply_cache_ops(std::span<const CacheOp> ops) override;
  int64_t kernel_launches() const override;
  std::vector<SplitDeviceStats> split_stats() const override;

  const std::vector<std::unique_ptr<Backend>>& stages() const { return stages_; }

 private:
  std::vector<std::unique_ptr<Backend>> stages_;
  std::vector<DeviceId> devices_;
  std::vector<std::unique_ptr<ActivationLink>> links_;
  ForwardOutput stage_scratch_;  // what a stage that is not last is handed (left untouched)
};

// Builds a layer split of `model` over CPU "devices": one CpuBackend per device with
// num_cpu_threads threads each (the stages run one after another), HostStagedLinks between
// them. ranges: empty = balanced by weight bytes (equal shares), else one range per device.
// Throws std::invalid_argument for a non-CPU device, a bad range or more devices than layers.
std::unique_ptr<LayerSplitBackend> make_cpu_layer_split(const std::vector<DeviceId>& devices,
                                                        std::vector<LayerRange> ranges, const LoadedModel& model,
                                                        const CacheConfig& cache, int num_cpu_threads);

// The balanced ranges for devices of equal capacity (runtime/device_split.h
// balance_layer_ranges over the model's weight bytes).
std::vector<LayerRange> balanced_layer_ranges(const ModelWeights& weights, size_t num_devices);

}  // namespace deltaserve::runtime
