#include "runtime/device_split.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace deltaserve::runtime {
namespace {

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    std::string_view part = text.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    parts.push_back(part);
    if (comma == std::string_view::npos) return parts;
    begin = comma + 1;
  }
}

// A decimal number of at most 6 digits; nullopt for anything else.
std::optional<int32_t> parse_count(std::string_view text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  int32_t value = 0;
  for (const char c : text) value = value * 10 + (c - '0');
  return value;
}

DeviceId parse_device(std::string_view item) {
  const std::string quoted = "'" + std::string(item) + "'";
  const size_t colon = item.find(':');
  const std::string_view kind = item.substr(0, colon);
  DeviceId device;
  if (kind == "cpu") device.kind = DeviceKind::kCpu;
  else if (kind == "cuda") device.kind = DeviceKind::kCuda;
  else if (kind == "hip") device.kind = DeviceKind::kHip;
  else throw std::invalid_argument("--devices: " + quoted + " is not a device (cpu:N, cuda:N or hip:N)");
  if (colon == std::string_view::npos) {
    if (device.kind != DeviceKind::kCpu)
      throw std::invalid_argument("--devices: " + quoted + " needs a device index (" + std::string(kind) + ":N)");
    return device;
  }
  const std::optional<int32_t> index = parse_count(item.substr(colon + 1));
  if (!index || *index > 1023) throw std::invalid_argument("--devices: " + quoted + " has no valid device index");
  device.index = *index;
  return device;
}

}  // namespace

const char* device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : kind == DeviceKind::kHip ? "hip" : "cpu";
}

std::string device_name(const DeviceId& device) {
  return std::string(device_kind_name(device.kind)) + ":" + std::to_string(device.index);
}

std::vector<DeviceId> parse_device_list(std::string_view text) {
  std::vector<DeviceId> devices;
  for (const std::string_view item : split_commas(text)) {
    if (item.empty()) throw std::invalid_argument("--devices: empty entry in '" + std::string(text) + "'");
    const DeviceId device = parse_device(item);
    if (std::find(devices.begin(), devices.end(), device) != devices.end())
      throw std::invalid_argument("--devices: " + device_name(device) + " is listed twice");
    if (!devices.empty() && devices.front().kind != device.kind)
      throw std::invalid_argument("--devices: all devices must be of one kind, got " + device_name(devices.front()) +
                                  " and " + device_name(device));
    devices.push_back(device);
  }
  return devices;
}

const char* split_mode_name(SplitMode mode) { return mode == SplitMode::kReplicas ? "replicas" : "layers"; }

std::optional<SplitMode> parse_split_mode(std::string_view text) {
  if (text == "layers") return SplitMode::kLayers;
  if (text == "replicas") return SplitMode::kReplicas;
  return std::nullopt;
}

LayerSplitOverride parse_layer_split(std::string_view text, size_t num_devices) {
  LayerSplitOverride split;
  if (text.empty()) return split;
  const std::string quoted = "'" + std::string(text) + "'";
  const std::vector<std::string_view> items = split_commas(text);
  if (items.size() != num_devices)
    throw std::invalid_argument("--split-layers " + quoted + " gives " + std::to_string(items.size()) +
                                " entries for " + std::to_string(num_devices) + " devices");
  const bool ranges = text.find('-') != std::string_view::npos;
  int32_t next = 0;  // first layer of the next range
  for (const std::string_view item : items) {
    if (!ranges) {
      const std::optional<int32_t> count = parse_count(item);
      if (!count || *count == 0)
        throw std::invalid_argument("--split-layers " + quoted + ": '" + std::string(item) +
                                    "' is not a layer count >= 1 (or give ranges FIRST-LAST)");
      split.counts.push_back(*count);
      continue;
    }
    const size_t dash = item.find('-');
    const std::optional<int32_t> first = dash == std::string_view::npos ? std::nullopt : parse_count(item.substr(0, dash));
    const std::optional<int32_t> last = dash == std::string_view::npos ? std::nullopt : parse_count(item.substr(dash + 1));
    if (!first || !last)
      throw std::invalid_argument("--split-layers " + quoted + ": '" + std::string(item) +
                                  "' is not a range FIRST-LAST of layer indices");
    if (*first != next)
      throw std::invalid_argument("--split-layers " + quoted + ": range '" + std::string(item) + "' must start at layer " +
                                  std::to_string(next) + " (ranges are contiguous, in device order, from layer 0)");
    if (*last < *first)
      throw std::invalid_argument("--split-layers " + quoted + ": range '" + std::string(item) + "' is empty");
    split.counts.push_back(*last - *first + 1);
    next = *last + 1;
  }
  return split;
}

std::vector<LayerRange> resolve_layer_ranges(const LayerSplitOverride& split, int32_t num_layers) {
  const int64_t total = std::accumulate(split.counts.begin(), split.counts.end(), int64_t{0});
  if (total != num_layers)
    throw std::invalid_argument("--split-layers covers " + std::to_string(total) + " layers but the model has " +
                                std::to_string(num_layers) + " (layers 0-" + std::to_string(num_layers - 1) + ")");
  std::vector<LayerRange> ranges;
  int32_t first = 0;
  for (const int32_t count : split.counts) {
    ranges.push_back({first, first + count});
    first += count;
  }
  return ranges;
}

std::vector<LayerRange> balance_layer_ranges(std::span<const int64_t> layer_bytes, int64_t head_bytes,
                                             int64_t tail_bytes, std::span<const double> capacity) {
  const int32_t num_layers = static_cast<int32_t>(layer_bytes.size());
  const int32_t num_devices = static_cast<int32_t>(capacity.size());
  if (num_devices < 1) throw std::invalid_argument("a layer split needs at least one device");
  if (num_devices > num_layers)
    throw std::invalid_argument("a layer split over " + std::to_string(num_devices) + " devices needs at least as many layers; the model has " +
                                std::to_string(num_layers));
  for (const double c : capacity)
    if (!(c > 0)) throw std::invalid_argument("a layer split needs a positive capacity on every device");
  // prefix[i]: bytes up to (not including) layer i, the first device's head included.
  std::vector<double> prefix(static_cast<size_t>(num_layers) + 1);
  prefix[0] = static_cast<double>(head_bytes);
  for (int32_t i = 0; i < num_layers; ++i)
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + static_cast<double>(layer_bytes[static_cast<size_t>(i)]);
  const double total = prefix.back() + static_cast<double>(tail_bytes);
  const double total_capacity = std::accumulate(capacity.begin(), capacity.end(), 0.0);
  std::vector<LayerRange> ranges;
  int32_t first = 0;
  double capacity_so_far = 0;
  for (int32_t d = 0; d + 1 < num_devices; ++d) {
    capacity_so_far += capacity[static_cast<size_t>(d)];
    const double target = total * capacity_so_far / total_capacity;
    // The cut (first layer of the next device) nearest the target, leaving a layer for each
    // device after this one.
    const int32_t lowest = first + 1, highest = num_layers - (num_devices - 1 - d);
    int32_t cut = lowest;
    for (int32_t i = lowest; i <= highest; ++i)
      if (std::abs(prefix[static_cast<size_t>(i)] - target) < std::abs(prefix[static_cast<size_t>(cut)] - target)) cut = i;
    ranges.push_back({first, cut});
    first = cut;
  }
  ranges.push_back({first, num_layers});
  return ranges;
}

std::string describe_layer_split(std::span<const DeviceId> devices, std::span<const LayerRange> ranges) {
  std::string text;
  for (size_t d = 0; d < devices.size() && d < ranges.size(); ++d) {
    if (!text.empty()) text += ",";
    text += device_name(devices[d]) + "[" + std::to_string(ranges[d].first) + "-" + std::to_string(ranges[d].end - 1) + "]";
  }
  return text;
}

}  // namespace deltaserve::runtime
