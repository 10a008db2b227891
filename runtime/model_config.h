// Hyperparameters of a Qwen3.5 / Qwen3.6 hybrid text model (MODEL.md sections 1 and 5.2).
// Filled once by a loader (GGUF or HF), validated, then kept const.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltaserve::runtime {

enum class Architecture { Dense, Moe };  // GGUF "qwen35" / "qwen35moe"

enum class LayerKind { GatedDeltaNet, Attention };

struct ModelConfig {
  Architecture arch = Architecture::Dense;
  std::string name;  // general.name, for logs and /v1/models

  int64_t num_vocab = 0;     // V (rows of token_embd / output)
  int64_t num_embd = 0;      // H
  int64_t num_layers = 0;    // L: trunk layers, MTP excluded
  int64_t num_mtp_layers = 0;  // nextn_predict_layers (0 or 1)
  int64_t context_length = 0;  // trained maximum
  float rms_eps = 1e-6f;
  bool tied_embeddings = false;  // output.weight absent: the LM head is token_embd

  // Gated attention.
  int64_t num_heads = 0;     // nh
  int64_t num_kv_heads = 0;  // nkv
  int64_t head_dim = 0;      // hd
  int64_t rope_dims = 0;     // R = hd * partial_rotary_factor
  float rope_base = 1e7f;

  // Gated DeltaNet.
  int64_t conv_kernel = 4;   // Kc
  int64_t ssm_k_heads = 0;   // Hk
  int64_t ssm_v_heads = 0;   // Hv
  int64_t ssm_head_dim = 0;  // dk = dv
  int64_t full_attention_interval = 4;
  std::vector<LayerKind> layer_kinds;  // size num_layers

  // FFN.
  int64_t ffn_dim = 0;          // I (dense)
  int64_t num_experts = 0;      // E (MoE)
  int64_t num_experts_used = 0;  // k
  int64_t expert_ffn_dim = 0;   // Ie
  int64_t shared_ffn_dim = 0;   // Is

  // Special tokens, -1 where the file has none.
  int32_t bos_token = -1;
  int32_t eos_token = -1;

  int64_t ssm_key_dim() const { return ssm_k_heads * ssm_head_dim; }    // Dk
  int64_t ssm_value_dim() const { return ssm_v_heads * ssm_head_dim; }  // Dv
  int64_t conv_channels() const { return 2 * ssm_key_dim() + ssm_value_dim(); }  // Dc
  bool is_moe() const { return arch == Architecture::Moe; }
  int64_t num_attention_layers() const;
  int64_t num_gdn_layers() const { return num_layers - num_attention_layers(); }
};

// Upper bounds that validate() enforces, so that no later product of two or three sizes
// can overflow int64 and no corrupt file can make a loader allocate without limit.
inline constexpr int64_t kMaxModelLayers = 1024;
inline constexpr int64_t kMaxModelDim = int64_t{1} << 24;

// Layer i is attention iff (i + 1) % interval == 0 (HF's default for layer_types and
// llama.cpp's rule). Throws std::runtime_error when num_layers or interval is out of range.
std::vector<LayerKind> layer_kinds_from_interval(int64_t num_layers, int64_t interval);

// Throws std::runtime_error naming the first inconsistent field (zero sizes, head_dim not
// divisible, Hv not a multiple of Hk, layer_kinds of the wrong length, ...).
void validate(const ModelConfig& config);

}  // namespace deltaserve::runtime
