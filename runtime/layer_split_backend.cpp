#include "runtime/layer_split_backend.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/cpu/cpu_backend.h"

namespace deltaserve::runtime {

LayerSplitBackend::LayerSplitBackend(std::vector<std::unique_ptr<Backend>> stages, std::vector<DeviceId> devices,
                                     std::vector<std::unique_ptr<ActivationLink>> links)
    : stages_(std::move(stages)), devices_(std::move(devices)), links_(std::move(links)) {
  if (stages_.empty() || devices_.size() != stages_.size() || links_.size() + 1 != stages_.size())
    throw std::invalid_argument("a layer split needs one device per stage and one link between each pair");
  const int32_t num_layers = static_cast<int32_t>(stages_.front()->config().num_layers);
  int32_t next = 0;
  for (size_t d = 0; d < stages_.size(); ++d) {
    const LayerRange range = stages_[d]->layer_range();
    if (range.first != next || range.size() < 1)
      throw std::invalid_argument("layer split: " + runtime::device_name(devices_[d]) + " holds layers " +
                                  std::to_string(range.first) + "-" + std::to_string(range.end - 1) +
                                  ", expected a non-empty range from layer " + std::to_string(next));
    const CacheConfig& a = stages_[d]->cache_config();
    const CacheConfig& b = stages_.front()->cache_config();
    if (a.num_state_slots != b.num_state_slots || a.num_kv_blocks != b.num_kv_blocks ||
        a.kv_block_tokens != b.kv_block_tokens || a.max_verify_rows != b.max_verify_rows)
      throw std::invalid_argument("layer split: every device needs the same slots, KV blocks and verify rows");
    next = range.end;
  }
  if (next != num_layers)
    throw std::invalid_argument("layer split: the devices hold layers 0-" + std::to_string(next - 1) + " of " +
                                std::to_string(num_layers));
}

std::string LayerSplitBackend::name() const {
  std::vector<LayerRange> ranges;
  for (const auto& stage : stages_) ranges.push_back(stage->layer_range());
  return describe_layer_split(devices_, ranges);
}

void LayerSplitBackend::forward(const BatchPlan& plan, ForwardOutput& out) {
  const int64_t rows = plan.num_rows();
  for (size_t d = 0; d < stages_.size(); ++d) {
    if (d > 0) links_[d - 1]->copy(stages_[d - 1]->stage_output(), stages_[d]->stage_input(rows));
    stages_[d]->forward(plan, d + 1 == stages_.size() ? out : stage_scratch_);
  }
}

void LayerSplitBackend::forward_mtp(const MtpPlan& plan, ForwardOutput& out) { stages_.back()->forward_mtp(plan, out); }

void LayerSplitBackend::rollback(int32_t slot, int32_t num_rows_kept) {
  // Every stage saw the same verify step, so each accepts (or refuses) the same rollback; the
  // first refuses before any stage moved.
  for (const auto& stage : stages_) stage->rollback(slot, num_rows_kept);
}

BackendMemoryStats LayerSplitBackend::memory_stats() const {
  BackendMemoryStats total;
  for (const auto& stage : stages_) {
    const BackendMemoryStats m = stage->memory_stats();
    total.device_bytes_used += m.device_bytes_used;
    total.device_bytes_total += m.device_bytes_total;
    total.pinned_bytes += m.pinned_bytes;
    total.pinned_registrations += m.pinned_registrations;
    total.host_bytes_held += m.host_bytes_held;
  }
  for (const auto& link : links_) total.host_bytes_held += link->stats().staging_bytes;
  return total;
}

int32_t LayerSplitBackend::prefill_chunk_align() const {
  int32_t align = 1;
  for (const auto& stage : stages_) align = std::max(align, stage->prefill_chunk_align());
  return align;
}

int64_t LayerSplitBackend::checkpoint_bytes() const {
  int64_t bytes = 0;
  for (const auto& stage : stages_) bytes += stage->checkpoint_bytes();
  return bytes;
}

void LayerSplitBackend::reserve_checkpoints(int32_t num_device, int32_t num_host) {
  for (const auto& stage : stages_) stage->reserve_checkpoints(num_device, num_host);
}

void LayerSplitBackend::apply_cache_ops(std::span<const CacheOp> ops) {
  // Each stage checks the whole list against the same limits before its first copy, so a bad
  // list fails on the first stage, before any stage changed.
  for (const auto& stage : stages_) stage->apply_cache_ops(ops);
}

int64_t LayerSplitBackend::kernel_launches() const {
  int64_t total = 0;
  for (const auto& stage : stages_) {
    const int64_t n = stage->kernel_launches();
    if (n < 0) return -1;
    total += n;
  }
  return total;
}

std::vector<SplitDeviceStats> LayerSplitBackend::split_stats() const {
  std::vector<SplitDeviceStats> stats;
  for (size_t d = 0; d < stages_.size(); ++d) {
    const BackendMemoryStats m = stages_[d]->memory_stats();
    SplitDeviceStats& s = stats.emplace_back();
    s.device = devices_[d];
    s.layers = stages_[d]->layer_range();
    s.bytes_used = devices_[d].kind == DeviceKind::kCpu ? m.host_bytes_held : m.device_bytes_used;
    s.bytes_total = m.device_bytes_total;
    if (d > 0) {
      s.inbound = links_[d - 1]->stats();
      if (devices_[d].kind == DeviceKind::kCpu) s.bytes_used += s.inbound.staging_bytes;  // the staging buffer sits on the receiving side
    }
  }
  return stats;
}

std::vector<LayerRange> balanced_layer_ranges(const ModelWeights& weights, size_t num_devices) {
  std::vector<int64_t> layer_bytes;
  for (const LayerWeights& layer : weights.layers) layer_bytes.push_back(layer_weight_bytes(layer));
  const std::vector<double> capacity(num_devices, 1.0);
  return balance_layer_ranges(layer_bytes, head_weight_bytes(weights), tail_weight_bytes(weights), capacity);
}

std::unique_ptr<LayerSplitBackend> make_cpu_layer_split(const std::vector<DeviceId>& devices,
                                                        std::vector<LayerRange> ranges, const LoadedModel& model,
                                                        const CacheConfig& cache, int num_cpu_threads) {
  for (const DeviceId& device : devices)
    if (device.kind != DeviceKind::kCpu)
      throw std::invalid_argument("make_cpu_layer_split: " + device_name(device) + " is not a CPU device");
  if (devices.size() < 2) throw std::invalid_argument("a layer split needs at least two devices");
  if (ranges.empty()) ranges = balanced_layer_ranges(model.weights, devices.size());
  if (ranges.size() != devices.size())
    throw std::invalid_argument("a layer split needs one layer range per device");
  std::vector<std::unique_ptr<Backend>> stages;
  std::vector<std::unique_ptr<ActivationLink>> links;
  for (size_t d = 0; d < devices.size(); ++d) {
    stages.push_back(std::make_unique<CpuBackend>(model, cache, num_cpu_threads, ranges[d], devices[d]));
    if (d > 0) links.push_back(std::make_unique<HostStagedLink>());
  }
  return std::make_unique<LayerSplitBackend>(std::move(stages), devices, std::move(links));
}

}  // namespace deltaserve::runtime
