// load_hf_model: an HF model directory -> LoadedModel in the GGUF conventions.
#include "runtime/hf_loader.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "runtime/hf_converter.h"
#include "runtime/safetensors_file.h"

namespace deltaserve::runtime {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uintmax_t kMaxJsonBytes = 64u << 20;  // config / index / tokenizer_config

json read_json_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw std::runtime_error(path.string() + ": cannot read: " + ec.message());
  if (size > kMaxJsonBytes) throw std::runtime_error(path.string() + ": larger than 64 MiB");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw std::runtime_error(path.string() + ": cannot read");
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw std::runtime_error(path.string() + ": invalid JSON: " + e.what());
  }
}

// The tensors of every shard, by checkpoint name.
struct Checkpoint {
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, TensorView> tensors;
};

// Shard file names from model.safetensors.index.json, checked to be plain names inside the
// directory; also returns the index's name -> file map for a cross-check.
std::set<std::string> shard_names(const fs::path& index_path, std::map<std::string, std::string>& weight_map) {
  const json index = read_json_file(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw std::runtime_error(index_path.string() + ": 'weight_map': missing or not an object");
  }
  std::set<std::string> names;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw std::runtime_error(index_path.string() + ": 'weight_map': '" + tensor + "' is not a file name");
    const std::string& f = file.get_ref<const std::string&>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f[0] == '.') {
      throw std::runtime_error(index_path.string() + ": 'weight_map': bad shard file name '" + f + "'");
    }
    names.insert(f);
    weight_map.emplace(tensor, f);
  }
  if (names.empty()) throw std::runtime_error(index_path.string() + ": 'weight_map': empty");
  return names;
}

Checkpoint open_checkpoint(const fs::path& dir) {
  std::set<std::string> names;
  std::map<std::string, std::string> weight_map;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    names = shard_names(index_path, weight_map);
  } else if (fs::exists(dir / "model.safetensors")) {
    names.insert("model.safetensors");
  } else {
    throw std::runtime_error(dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  Checkpoint ckpt;
  std::map<std::string, std::string> file_of;
  for (const std::string& name : names) {
    const std::string path = (dir / name).string();
    ckpt.files.push_back(SafetensorsFile::open(path));
    for (const TensorView& t : ckpt.files.back()->tensors()) {
      if (!ckpt.tensors.emplace(t.name, t).second) {
        throw std::runtime_error(path + ": tensor '" + t.name + "': also in " + file_of[t.name]);
      }
      file_of[t.name] = name;
    }
  }
  for (const auto& [tensor, file] : weight_map) {
    if (file_of.count(tensor) == 0 || file_of[tensor] != file) {
      throw std::runtime_error(index_path.string() + ": tensor '" + tensor + "': listed in " + file +
                               " but not found there");
    }
  }
  return ckpt;
}

// tokenizer_config.json "chat_template": a string, or a list of {name, template} of which
// "default" is used; else chat_template.jinja (where newer transformers write it).
std::string read_chat_template(const fs::path& dir) {
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json config = read_json_file(config_path);
    const auto it = config.is_object() ? config.find("chat_template") : config.end();
    if (config.is_object() && it != config.end()) {
      if (it->is_string()) return it->get<std::string>();
      if (it->is_array()) {
        for (const json& entry : *it) {
          if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
              entry["template"].is_string()) {
            return entry["template"].get<std::string>();
          }
        }
        return "";
      }
      if (!it->is_null()) throw std::runtime_error(config_path.string() + ": 'chat_template': not a string or list");
    }
  }
  const fs::path jinja_path = dir / "chat_template.jinja";
  std::error_code ec;
  if (fs::is_regular_file(jinja_path, ec) && fs::file_size(jinja_path, ec) <= kMaxJsonBytes && !ec) {
    std::ifstream in(jinja_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  return "";
}

bool has_prefix(const std::map<std::string, TensorView>& tensors, const std::string& prefix) {
  const auto it = tensors.lower_bound(prefix);
  return it != tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::unique_ptr<LoadedModel> load_hf_model(const std::string& dir_string) {
  const fs::path dir(dir_string);
  auto model = std::make_unique<LoadedModel>();
  model->path = dir_string;
  model->format = "hf";
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) throw std::runtime_error(dir_string + ": no config.json");
  ModelConfig config = config_from_hf_json(read_json_file(config_path), config_path.string());
  const fs::path normal = dir.lexically_normal();
  config.name = (normal.has_filename() ? normal.filename() : normal.parent_path().filename()).string();

  Checkpoint ckpt = open_checkpoint(dir);
  // lm_head absent -> tied; mtp.* absent -> no MTP head, whatever config.json says.
  config.tied_embeddings = config.tied_embeddings || ckpt.tensors.count("lm_head.weight") == 0;
  if (!has_prefix(ckpt.tensors, "mtp.")) config.num_mtp_layers = 0;
  try {
    validate(config);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(config_path.string() + ": hyperparameters: " + e.what());
  }
  model->config = config;

  HfConverter converter(model->config, dir_string, model->owned_buffers);
  model->tensors = converter.convert(ckpt.tensors);
  model->weights = bind_weights(model->config, model->tensors, dir_string);
  for (auto& file : ckpt.files) model->mappings.push_back(std::move(file));

  if (fs::exists(dir / "tokenizer.json")) model->tokenizer_json_path = (dir / "tokenizer.json").string();
  model->chat_template = read_chat_template(dir);
  return model;
}

}  // namespace deltaserve::runtime
