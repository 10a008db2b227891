// The CPU backend: runs the Qwen3.5 hybrid over a batch plan with the reference kernels,
// threaded over a pool. It is the oracle for the GPU backend and the engine of CI.
// Owned and called by one engine thread.
#pragma once

#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_layers.h"
#include "runtime/model_weights.h"
#include "runtime/thread_pool.h"

namespace deltaserve::runtime {

class CpuBackend final : public Backend {
 public:
  // The model must outlive the backend (weights are views into it). Throws
  // std::invalid_argument for a bad cache config, and for state_precision bf16 (GPU only).
  CpuBackend(const LoadedModel& model, const CacheConfig& cache, int num_threads);
  // A stage of a layer split (Backend::layer_range): trunk layers [layers.first, layers.end)
  // on CPU "device" `device`; throws std::invalid_argument for an empty or out-of-range range.
  CpuBackend(const LoadedModel& model, const CacheConfig& cache, int num_threads, LayerRange layers, DeviceId device);

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return config_; }
  const CacheConfig& cache_config() const override { return cache_; }
  void forward(const BatchPlan& plan, ForwardOutput& out) override;
  void forward_mtp(const MtpPlan& plan, ForwardOutput& out) override;
  void rollback(int32_t slot, int32_t num_rows_kept) override;
  // Prefix-cache checkpoints (cpu_checkpoints.cpp): both tiers are host vectors here, each
  // allocated on its first save, so an unused budget costs nothing.
  int64_t checkpoint_bytes() const override;
  void reserve_checkpoints(int32_t num_device, int32_t num_host) override;
  void apply_cache_ops(std::span<const CacheOp> ops) override;
  BackendMemoryStats memory_stats() const override;
  LayerRange layer_range() const override { return layers_; }
  ActivationBuffer stage_input(int64_t num_rows) override;
  ActivationBuffer stage_output() override;

  // Bytes held by the KV cache and the recurrent state (for logs and metrics).
  int64_t kv_cache_bytes() const;
  int64_t state_bytes() const;
  // Bytes of the saved checkpoints (both tiers).
  int64_t checkpoint_bytes_held() const;

  // Test hooks: the recurrent state of one slot in one GDN layer (by GDN layer index).
  const float* delta_state(int gdn_layer, int32_t slot) const;
  const float* conv_state(int gdn_layer, int32_t slot) const;

 private:
  // CacheConfig::gdn_prefill on the CPU: kAuto stays recurrent (bench/RESULTS.md, "CPU chunked GDN").
  bool chunked_gdn_prefill() const { return cache_.gdn_prefill == GdnPrefill::kChunked; }
  void check_plan(const BatchPlan& plan) const;
  // Token ids in the vocabulary; a block table that covers the rows' positions with valid ids.
  void check_rows(size_t index, const std::vector<int32_t>& tokens, int64_t first_position,
                  const std::vector<int32_t>& kv_blocks) const;
  void reset_slot(int32_t slot);
  // Final norm for hidden_rows and the LM head for logit_rows (a subset of them), into out
  // (whose layout the caller set): hidden rows, argmax_ids of every logit row, drawn_ids
  // (draws: per logit row, its params; empty where a row draws nothing), host rows.
  void lm_head(const float* x, const std::vector<int64_t>& hidden_rows, const std::vector<int64_t>& logit_rows,
               const std::vector<const kernels::DrawParams*>& draws, const TensorView& norm, ForwardOutput& out);

  bool first_stage() const { return layers_.first == 0; }
  bool last_stage() const { return layers_.end == config_.num_layers; }
  // The trunk layers of the range, from the stage's first layer.
  // capture: the plan's capture_layers; their outputs at capture_rows land in *captured
  // ([capture_rows][layers][H]).
  struct LayerCapture {
    const std::vector<int32_t>* layers = nullptr;
    const std::vector<int64_t>* rows = nullptr;
    std::vector<float>* captured = nullptr;
  };
  void run_layers(const cpu::StepRows& rows, float* x, const LayerCapture& capture);

  const LoadedModel& model_;
  const ModelConfig& config_;
  const ModelWeights& weights_;
  CacheConfig cache_;
  ThreadPool pool_;
  std::vector<cpu::GdnStateLayer> gdn_state_;  // one per GDN layer, in layer order
  std::vector<cpu::KvLayer> kv_;               // one per attention layer, in layer order
  cpu::KvLayer mtp_kv_;                         // the MTP block's own cache
  LayerRange layers_;                           // the trunk layers this backend holds
  DeviceId device_;                             // its CPU "device" in a layer split
  std::vector<float> activations_;              // [rows][H]: the residual stream of the last step
  std::vector<int> layer_cache_index_;          // trunk layer -> index in gdn_state_ or kv_ (-1: not held)
  std::vector<int32_t> verify_rows_;            // per slot: rows of its last verify step (0 = none)
  int64_t entries_per_slot_ = 1;                // GDN state entries per slot (GdnStateLayer)
  std::vector<int32_t> live_entry_;             // per slot: the entry holding its live state
  std::vector<int32_t> ring_first_;             // per slot: first ring entry of its last verify step
  std::vector<float> logit_scratch_;            // every logit row when some stay off the host
  // Checkpoints per tier: [index] -> every GDN layer's conv then delta floats (empty until saved).
  std::vector<std::vector<float>> checkpoints_[2];
  bool checkpoints_reserved_ = false;
  std::vector<float>& checkpoint(CheckpointRef ref);
  void save_state(int32_t slot, std::vector<float>& dst);
  void restore_state(const std::vector<float>& src, int32_t slot);
  void copy_kv_block(int32_t src, int32_t dst);
};

}  // namespace deltaserve::runtime
