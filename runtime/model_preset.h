// Named model shapes without weights: the built-in presets are config/presets/*.json,
// compiled into the library (config/presets/embed_presets.cmake), so a bare binary knows
// them. A preset is an HF text config (MODEL.md 1.1 field names, read by
// config_from_hf_json) wrapped with a name, aliases and a one-line description:
//
//   {"preset": "qwen3.6-35b-a3b", "aliases": ["qwen3.5-35b-a3b"], "description": "...",
//    "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, ...}}
//
// Pure functions; any thread; startup only (they parse JSON).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model_config.h"

namespace deltaserve::runtime {

struct ModelPreset {
  std::string name;                  // config.name too
  std::vector<std::string> aliases;  // other names find_preset accepts
  std::string description;
  std::string source;  // "config/presets/<file>" for a built-in one, else the file's path
  ModelConfig config;  // validated
};

// One embedded preset file (defined by the generated presets_data.cpp).
struct EmbeddedPresetFile {
  std::string_view file_name;  // e.g. "qwen3.6-27b.json"
  std::string_view json_text;
};
std::span<const EmbeddedPresetFile> embedded_preset_files();

// Parses and validates one preset. Throws std::runtime_error "<source>: <what is wrong>".
ModelPreset parse_preset(const nlohmann::json& preset_json, const std::string& source);

// Every built-in preset, sorted by name. Throws only if an embedded file is broken (a build
// error that the preset tests catch).
std::vector<ModelPreset> builtin_presets();

// A built-in preset by name or alias (ASCII case-insensitive), or, when the argument ends in
// ".json", the preset file at that path. Throws std::runtime_error naming the argument and
// listing the built-in names when nothing matches.
ModelPreset find_preset(const std::string& name_or_path);

}  // namespace deltaserve::runtime
