// How one model spreads over several devices (`--devices cpu:0,cpu:1 --split layers`): the
// typed device list, the split mode and the layer ranges of a layer split. Parsing and range
// arithmetic only; the layer-split backend (runtime/layer_split_backend.h) and the server's
// configuration (server/server_config.*) both use it. Every parse error is a
// std::invalid_argument whose message is one readable line naming the option.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::runtime {

enum class DeviceKind : int32_t { kCpu, kCuda, kHip };

struct DeviceId {
  DeviceKind kind = DeviceKind::kCpu;
  int32_t index = 0;
  bool operator==(const DeviceId&) const = default;
};

const char* device_kind_name(DeviceKind kind);
// "cpu:0", "cuda:1".
std::string device_name(const DeviceId& device);

// "cpu:0,cpu:1" / "cuda:0,cuda:1" / "hip:0": comma-separated <kind>:<index> (a bare "cpu" is
// cpu:0). Every device once, all of one kind (a mixed CPU + GPU split is not supported).
// Throws std::invalid_argument naming --devices.
std::vector<DeviceId> parse_device_list(std::string_view text);

// What several devices do: kLayers, each holds a contiguous range of layers (one engine);
// kReplicas, each holds the whole model (one engine per device behind one endpoint).
enum class SplitMode : int32_t { kLayers, kReplicas };
const char* split_mode_name(SplitMode mode);
std::optional<SplitMode> parse_split_mode(std::string_view text);  // "layers" / "replicas"

// Trunk layers [first, end) held by one device.
struct LayerRange {
  int32_t first = 0;
  int32_t end = 0;
  int32_t size() const { return end - first; }
  bool operator==(const LayerRange&) const = default;
};

// --split-layers: either inclusive ranges "0-19,20-39" (contiguous from layer 0) or layer
// counts per device "20,20"; empty text = no override (balanced by memory). Checks the shape
// only (one entry per device, every range non-empty and following the previous one); the
// model's layer count is checked by resolve_layer_ranges. Throws std::invalid_argument.
struct LayerSplitOverride {
  std::vector<int32_t> counts;  // layers per device, in device order; empty = no override
};
LayerSplitOverride parse_layer_split(std::string_view text, size_t num_devices);

// The override applied to a model of num_layers trunk layers: throws std::invalid_argument
// when the counts do not add up to num_layers.
std::vector<LayerRange> resolve_layer_ranges(const LayerSplitOverride& split, int32_t num_layers);

// Ranges chosen by memory: device d gets a share of the weight bytes proportional to
// capacity[d] (free memory on a GPU; equal shares for CPU devices). layer_bytes[i] is trunk
// layer i's weight bytes; head_bytes sit on the first device (the embedding), tail_bytes on
// the last (final norm, LM head, MTP head). Every device gets at least one layer; throws
// std::invalid_argument when there are more devices than layers.
std::vector<LayerRange> balance_layer_ranges(std::span<const int64_t> layer_bytes, int64_t head_bytes,
                                             int64_t tail_bytes, std::span<const double> capacity);

// "cpu:0[0-2],cpu:1[3-5]": the split in one line for logs and the backend's name.
std::string describe_layer_split(std::span<const DeviceId> devices, std::span<const LayerRange> ranges);

}  // namespace deltaserve::runtime
