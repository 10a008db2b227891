#include "runtime/dflash_model.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/quant.h"
#include "runtime/config_fields.h"
#include "runtime/safetensors_file.h"

namespace deltaserve::runtime {
namespace {

using json = nlohmann::json;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open (a DFlash draft model is a directory with config.json and model.safetensors)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class TensorReader {
 public:
  explicit TensorReader(const SafetensorsFile& file) : file_(file) {}
  // The tensor `name` (or "model." + name) as f32, checked against the HF shape [rows][cols]
  // (cols = 0: a vector of rows values).
  std::vector<float> get(const std::string& name, int64_t rows, int64_t cols = 0) const {
    const TensorView* t = file_.find(name);
    if (t == nullptr) t = file_.find("model." + name);
    if (t == nullptr) throw std::runtime_error(file_.path() + ": tensor '" + name + "' is missing");
    const bool vector = cols == 0;
    const bool shape_ok = vector ? (t->num_dims == 1 && t->ne[0] == rows)
                                 : (t->num_dims == 2 && t->ne[0] == cols && t->ne[1] == rows);
    if (!shape_ok) {
      const std::string want = vector ? "[" + std::to_string(rows) + "]"
                                      : "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
      std::string got = "[";
      for (int d = t->num_dims - 1; d >= 0; --d) got += std::to_string(t->ne[static_cast<size_t>(d)]) + (d > 0 ? ", " : "]");
      throw std::runtime_error(file_.path() + ": tensor '" + name + "' has shape " + got + ", config.json implies " + want);
    }
    std::vector<float> out(static_cast<size_t>(t->num_elements()));
    kernels::dequantize_row(t->type, t->data, out.data(), t->num_elements());
    return out;
  }

 private:
  const SafetensorsFile& file_;
};

}  // namespace

DFlashConfig parse_dflash_config(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(source + ": not valid JSON: " + e.what());
  }
  // Fields of config.json: dflash_config first (the draft's own settings), then the top level.
  const ConfigFields f(root, "dflash_config", source);
  const json* arch = f.find("architectures");
  if (arch != nullptr) {
    if (!arch->is_array()) f.fail("architectures", "expected an array");
    for (const json& a : *arch) {
      if (a == "DFlash2DraftModel")
        f.fail("architectures", "DFlash2 (dynamic convolutions, candidate selector) is not supported; use a DFlashDraftModel");
      if (a != "DFlashDraftModel") f.fail("architectures", "expected DFlashDraftModel, found " + a.dump());
    }
  }
  if (const json* bias = f.find("attention_bias"); bias != nullptr && *bias == true) f.fail("attention_bias", "biases are not supported");
  if (const json* causal = f.find("is_causal"); causal != nullptr && *causal == true)
    f.fail("is_causal", "causal blocks are not supported (DFlash blocks attend both ways)");
  if (const json* types = f.find("layer_types"); types != nullptr) {
    if (!types->is_array()) f.fail("layer_types", "expected an array");
    for (const json& t : *types) {
      if (t != "full_attention") f.fail("layer_types", "only full_attention layers are supported, found " + t.dump());
    }
  }
  DFlashConfig c;
  c.hidden = f.get_int_in("hidden_size", 1, 1 << 16);
  c.num_layers = f.get_int_in("num_hidden_layers", 1, 64);
  c.num_heads = f.get_int_in("num_attention_heads", 1, 1024);
  c.num_kv_heads = f.get_int_in("num_key_value_heads", 1, c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0) f.fail("num_key_value_heads", "must divide num_attention_heads");
  c.head_dim = f.find("head_dim") != nullptr ? f.get_int_in("head_dim", 2, 1024) : c.hidden / c.num_heads;
  if (c.head_dim % 2 != 0) f.fail("head_dim", "must be even (RoPE)");
  c.intermediate = f.get_int_in("intermediate_size", 1, 1 << 20);
  c.vocab = f.get_int_in("vocab_size", 1, int64_t{1} << 31);
  c.rms_eps = static_cast<float>(f.get_float("rms_norm_eps", 1e-6));
  double theta = f.get_float("rope_theta", 0.0);
  if (const json* rope = f.find("rope_parameters"); rope != nullptr && rope->is_object() && rope->contains("rope_theta"))
    theta = (*rope)["rope_theta"].get<double>();
  if (theta <= 0.0) f.fail("rope_theta", "missing (rope_theta or rope_parameters.rope_theta)");
  c.rope_theta = static_cast<float>(theta);
  c.block_size = static_cast<int32_t>(f.get_int_in("block_size", 2, 64));
  c.mask_token_id = static_cast<int32_t>(f.get_int_in("mask_token_id", 0, INT32_MAX));
  const json* ids = f.find("target_layer_ids");
  if (ids == nullptr || !ids->is_array() || ids->empty()) f.fail("target_layer_ids", "missing or empty");
  for (const json& id : *ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) f.fail("target_layer_ids", "expected layer indices >= 0, found " + id.dump());
    const auto layer = static_cast<int32_t>(id.get<int64_t>());
    if (!c.target_layer_ids.empty() && layer <= c.target_layer_ids.back()) f.fail("target_layer_ids", "must be increasing");
    c.target_layer_ids.push_back(layer);
  }
  c.output_multiplier = static_cast<float>(f.get_float("output_multiplier", 1.0));
  c.logit_softcap = static_cast<float>(f.get_float("final_logit_softcapping", 0.0));
  return c;
}

DFlashModel load_dflash_model(const std::string& dir, const ModelConfig& target) {
  const std::filesystem::path root(dir);
  const std::string config_path = (root / "config.json").string();
  DFlashModel m;
  m.path = dir;
  m.config = parse_dflash_config(read_file(config_path), config_path);
  const DFlashConfig& c = m.config;
  auto refuse = [&](const std::string& what) { throw std::runtime_error(config_path + ": " + what); };
  if (c.hidden != target.num_embd)
    refuse("hidden_size " + std::to_string(c.hidden) + " differs from the target's " + std::to_string(target.num_embd) + " (a drafter for another model?)");
  if (c.target_layer_ids.back() >= target.num_layers)
    refuse("target layer " + std::to_string(c.target_layer_ids.back()) + " is past the target's " + std::to_string(target.num_layers) + " layers");
  if (c.mask_token_id >= target.num_vocab)
    refuse("mask_token_id " + std::to_string(c.mask_token_id) + " is outside the target's vocabulary of " + std::to_string(target.num_vocab));

  const std::string weights_path = (root / "model.safetensors").string();
  if (!std::filesystem::exists(weights_path))
    throw std::runtime_error(weights_path + ": missing (a DFlash draft model is a directory with config.json and model.safetensors)");
  const auto file = SafetensorsFile::open(weights_path);
  const TensorReader r(*file);
  const int64_t h = c.hidden, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  m.fc = r.get("fc.weight", h, static_cast<int64_t>(c.target_layer_ids.size()) * target.num_embd);
  m.hidden_norm = r.get("hidden_norm.weight", h);
  m.norm = r.get("norm.weight", h);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    DFlashLayer& l = m.layers.emplace_back();
    l.input_norm = r.get(p + "input_layernorm.weight", h);
    l.post_norm = r.get(p + "post_attention_layernorm.weight", h);
    l.wq = r.get(p + "self_attn.q_proj.weight", q, h);
    l.wk = r.get(p + "self_attn.k_proj.weight", kv, h);
    l.wv = r.get(p + "self_attn.v_proj.weight", kv, h);
    l.wo = r.get(p + "self_attn.o_proj.weight", h, q);
    l.q_norm = r.get(p + "self_attn.q_norm.weight", c.head_dim);
    l.k_norm = r.get(p + "self_attn.k_norm.weight", c.head_dim);
    l.w_gate = r.get(p + "mlp.gate_proj.weight", c.intermediate, h);
    l.w_up = r.get(p + "mlp.up_proj.weight", c.intermediate, h);
    l.w_down = r.get(p + "mlp.down_proj.weight", h, c.intermediate);
  }
  return m;
}

}  // namespace deltaserve::runtime
