// Built-in and file presets -> validated ModelConfig (see model_preset.h).
#include "runtime/model_preset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runtime/hf_loader.h"

namespace deltaserve::runtime {

namespace {

using json = nlohmann::json;

constexpr uintmax_t kMaxPresetBytes = 1u << 20;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string string_field(const json& j, const char* key, const std::string& source, bool required) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw std::runtime_error(source + ": '" + key + "': missing");
    return "";
  }
  if (!it->is_string()) throw std::runtime_error(source + ": '" + key + "': expected a string");
  return it->get<std::string>();
}

json read_json(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot read preset: " + ec.message());
  if (size > kMaxPresetBytes) throw std::runtime_error(path + ": preset file larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw std::runtime_error(path + ": cannot read preset");
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}

bool matches(const ModelPreset& p, const std::string& wanted) {
  if (lower(p.name) == wanted) return true;
  return std::any_of(p.aliases.begin(), p.aliases.end(), [&](const std::string& a) { return lower(a) == wanted; });
}

}  // namespace

ModelPreset parse_preset(const json& j, const std::string& source) {
  if (!j.is_object()) throw std::runtime_error(source + ": a preset must be a JSON object");
  ModelPreset p;
  p.source = source;
  p.name = string_field(j, "preset", source, true);
  if (p.name.empty()) throw std::runtime_error(source + ": 'preset': empty name");
  p.description = string_field(j, "description", source, false);
  if (const auto it = j.find("aliases"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw std::runtime_error(source + ": 'aliases': expected a list of names");
    for (const json& a : *it) {
      if (!a.is_string()) throw std::runtime_error(source + ": 'aliases': expected a list of names");
      p.aliases.push_back(a.get<std::string>());
    }
  }
  if (!j.contains("text_config") || !j["text_config"].is_object()) {
    throw std::runtime_error(source + ": 'text_config': missing or not an object");
  }
  p.config = config_from_hf_json(j, source);
  p.config.name = p.name;
  try {
    validate(p.config);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(source + ": hyperparameters: " + e.what());
  }
  return p;
}

std::vector<ModelPreset> builtin_presets() {
  std::vector<ModelPreset> presets;
  for (const EmbeddedPresetFile& f : embedded_preset_files()) {
    const std::string source = "config/presets/" + std::string(f.file_name);
    json j;
    try {
      j = json::parse(f.json_text);
    } catch (const json::exception& e) {
      throw std::runtime_error(source + ": invalid JSON: " + e.what());
    }
    presets.push_back(parse_preset(j, source));
  }
  std::sort(presets.begin(), presets.end(), [](const ModelPreset& a, const ModelPreset& b) { return a.name < b.name; });
  return presets;
}

ModelPreset find_preset(const std::string& name_or_path) {
  if (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0) {
    return parse_preset(read_json(name_or_path), name_or_path);
  }
  const std::string wanted = lower(name_or_path);
  std::string known;
  for (ModelPreset& p : builtin_presets()) {
    if (matches(p, wanted)) return std::move(p);
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw std::runtime_error("unknown model preset '" + name_or_path + "' (built-in: " + known +
                           "; or give a preset .json file)");
}

}  // namespace deltaserve::runtime
