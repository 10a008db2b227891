// GpuTuning: the GPU backend's choices that change how it runs, never what it computes,
// resolved once at start-up (`deltaserve serve`'s configuration, `deltaserve bench`'s flags)
// and frozen in the CacheConfig the backend is built with. Every other form of a GPU kernel is
// picked by a rule on the device and the launch's shape (docs/gpu-tuning.md lists the options,
// their reasons and the retired switches). The product never reads the environment for these.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace deltaserve::runtime {

// Step graphs (capture a step's launches once per shape, replay after): kAuto is on with CUDA
// and off with HIP (graph replays there are not faster than eager launches); kOff runs every
// launch eagerly (debugging, a device whose graph capture fails).
enum class StepGraphMode : int32_t { kAuto, kOn, kOff };

inline const char* step_graph_mode_name(StepGraphMode m) {
  return m == StepGraphMode::kOn ? "on" : m == StepGraphMode::kOff ? "off" : "auto";
}
// "auto" / "on" / "off"; nullopt for anything else.
inline std::optional<StepGraphMode> parse_step_graph_mode(std::string_view text) {
  if (text == "auto") return StepGraphMode::kAuto;
  if (text == "on") return StepGraphMode::kOn;
  if (text == "off") return StepGraphMode::kOff;
  return std::nullopt;
}

// Forms that a rule picks between by row count or model shape, forced one way so the parity
// tests can compare them bit for bit on the same rows. Never set by the configuration: the
// defaults are the product's rules.
struct GpuParityForms {
  bool fuse_down_combine = true;   // false: MoE down products and combine as two launches at every row count
  bool carry_input_norms = true;   // false: the input norms of 1-2 decode rows as launches of their own
  bool defer_norms = true;         // false: a dense model's norms as launches of their own (staged matvec)
  int64_t tiled_decode_min_outputs = -1;  // -1: the product's line (gpu::kTiledDecodeMinOutputs); N: Q4_0
                                          // decode products of N+ outputs on the exact tile (tensor matvec)
};

struct GpuTuning {
  StepGraphMode step_graphs = StepGraphMode::kAuto;
  // The in-step timeline (a measuring build's, -DDELTASERVE_GPU_TIMELINE=ON): `deltaserve bench
  // --timeline` only; the backend prints each step shape's table when it is destroyed.
  bool timeline = false;
  GpuParityForms forms{};
};

}  // namespace deltaserve::runtime
