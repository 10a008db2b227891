// config_from_hf_json: HF config.json (MODEL.md 1.1) -> ModelConfig.
#include <limits>
#include <optional>
#include <stdexcept>

#include "runtime/config_fields.h"
#include "runtime/hf_loader.h"

namespace deltaserve::runtime {

namespace {

using json = nlohmann::json;

// Fields are looked up in text_config first, then at the top level (the multimodal wrapper
// keeps e.g. tie_word_embeddings at the top).
using Fields = ConfigFields;

std::optional<Architecture> architecture_of(const std::string& name) {
  if (name == "qwen3_5_text" || name == "qwen3_5" || name == "Qwen3_5ForCausalLM" ||
      name == "Qwen3_5ForConditionalGeneration") {
    return Architecture::Dense;
  }
  if (name == "qwen3_5_moe_text" || name == "qwen3_5_moe" || name == "Qwen3_5MoeForCausalLM" ||
      name == "Qwen3_5MoeForConditionalGeneration") {
    return Architecture::Moe;
  }
  return std::nullopt;
}

Architecture parse_architecture(const json& root, const Fields& f) {
  std::string seen;
  std::vector<std::string> names;
  if (const json* t = f.find("model_type"); t != nullptr && t->is_string()) names.push_back(t->get<std::string>());
  if (root.contains("model_type") && root["model_type"].is_string()) names.push_back(root["model_type"]);
  if (root.contains("architectures") && root["architectures"].is_array()) {
    for (const json& a : root["architectures"]) {
      if (a.is_string()) names.push_back(a.get<std::string>());
    }
  }
  for (const std::string& n : names) {
    if (const auto arch = architecture_of(n)) return *arch;
    seen += (seen.empty() ? "'" : ", '") + n + "'";
  }
  f.fail("model_type", "unsupported architecture " + (seen.empty() ? std::string("(none given)") : seen) +
                           " (expected a qwen3_5 or qwen3_5_moe text model)");
}

std::vector<LayerKind> parse_layer_types(const Fields& f, const json& types, int64_t num_layers) {
  if (!types.is_array() || static_cast<int64_t>(types.size()) != num_layers) {
    f.fail("layer_types", "expected a list of num_hidden_layers (" + std::to_string(num_layers) + ") entries");
  }
  std::vector<LayerKind> kinds;
  for (const json& t : types) {
    if (t == "full_attention") kinds.push_back(LayerKind::Attention);
    else if (t == "linear_attention") kinds.push_back(LayerKind::GatedDeltaNet);
    else f.fail("layer_types", "unknown layer type " + t.dump());
  }
  return kinds;
}

void read_rope(const Fields& f, ModelConfig& c) {
  // HF 5.x nests these in rope_parameters; older configs keep them at the top.
  const json* params = f.find("rope_parameters");
  if (params != nullptr && !params->is_object()) f.fail("rope_parameters", "expected an object");
  auto nested = [&](const char* key) -> const json* {
    if (params != nullptr && params->contains(key) && !(*params)[key].is_null()) return &(*params)[key];
    return f.find(key);
  };
  c.rope_base = static_cast<float>(f.get_float(nested("rope_theta"), "rope_theta", 1e7));
  const double factor = f.get_float(nested("partial_rotary_factor"), "partial_rotary_factor", 0.25);
  if (!(factor > 0.0 && factor <= 1.0)) f.fail("partial_rotary_factor", "must be in (0, 1]");
  c.rope_dims = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
}

void read_ssm(const Fields& f, ModelConfig& c) {
  c.conv_kernel = f.get_int("linear_conv_kernel_dim", 4);
  c.ssm_k_heads = f.get_int("linear_num_key_heads");
  c.ssm_v_heads = f.get_int("linear_num_value_heads");
  c.ssm_head_dim = f.get_int("linear_key_head_dim");
  if (f.get_int("linear_value_head_dim", c.ssm_head_dim) != c.ssm_head_dim) {
    f.fail("linear_value_head_dim", "must equal linear_key_head_dim (GGUF has one state_size)");
  }
}

}  // namespace

ModelConfig config_from_hf_json(const json& root, const std::string& source) {
  const Fields f(root, "text_config", source);
  ModelConfig c;
  c.arch = parse_architecture(root, f);
  c.num_vocab = f.get_int("vocab_size");
  c.num_embd = f.get_int("hidden_size");
  c.num_layers = f.get_int("num_hidden_layers");
  c.num_mtp_layers = f.get_int("mtp_num_hidden_layers", 0);
  c.context_length = f.get_int("max_position_embeddings");
  c.rms_eps = static_cast<float>(f.get_float("rms_norm_eps", 1e-6));
  c.tied_embeddings = f.get_bool("tie_word_embeddings", false);
  c.num_heads = f.get_int("num_attention_heads");
  c.num_kv_heads = f.get_int("num_key_value_heads", c.num_heads);
  c.head_dim = f.get_int("head_dim", c.num_heads > 0 ? c.num_embd / c.num_heads : 0);
  read_rope(f, c);
  read_ssm(f, c);
  c.full_attention_interval = f.get_int("full_attention_interval", 4);
  try {
    const json* types = f.find("layer_types");
    c.layer_kinds = types != nullptr ? parse_layer_types(f, *types, c.num_layers)
                                     : layer_kinds_from_interval(c.num_layers, c.full_attention_interval);
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).rfind(source, 0) == 0) throw;
    throw std::runtime_error(source + ": " + e.what());
  }
  if (c.is_moe()) {
    c.num_experts = f.get_int("num_experts");
    c.num_experts_used = f.get_int("num_experts_per_tok");
    c.expert_ffn_dim = f.get_int("moe_intermediate_size");
    c.shared_ffn_dim = f.get_int("shared_expert_intermediate_size");
  } else {
    c.ffn_dim = f.get_int("intermediate_size");
  }
  c.bos_token = f.get_token("bos_token_id");
  c.eos_token = f.get_token("eos_token_id");
  return c;
}

}  // namespace deltaserve::runtime
