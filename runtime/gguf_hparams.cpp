#include "runtime/gguf_hparams.h"

#include <string>

namespace deltaserve::runtime {

const char* gguf_architecture_name(const ModelConfig& c) { return c.is_moe() ? "qwen35moe" : "qwen35"; }

GgufMetadata gguf_hparams(const ModelConfig& c) {
  const std::string arch = gguf_architecture_name(c);
  GgufMetadata m;
  auto u32 = [&](const std::string& key, int64_t v) { m.emplace_back(arch + "." + key, gguf_uint32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const std::string& key, float v) { m.emplace_back(arch + "." + key, gguf_float32(v)); };
  m.emplace_back("general.architecture", gguf_string(arch));
  m.emplace_back("general.name", gguf_string(c.name));
  u32("block_count", c.num_layers + c.num_mtp_layers);
  u32("nextn_predict_layers", c.num_mtp_layers);
  u32("context_length", c.context_length);
  u32("embedding_length", c.num_embd);
  u32("vocab_size", c.num_vocab);
  u32("attention.head_count", c.num_heads);
  u32("attention.head_count_kv", c.num_kv_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  f32("attention.layer_norm_rms_epsilon", c.rms_eps);
  u32("rope.dimension_count", c.rope_dims);
  f32("rope.freq_base", c.rope_base);
  u32("ssm.conv_kernel", c.conv_kernel);
  u32("ssm.state_size", c.ssm_head_dim);
  u32("ssm.group_count", c.ssm_k_heads);
  u32("ssm.time_step_rank", c.ssm_v_heads);
  u32("ssm.inner_size", c.ssm_value_dim());
  u32("full_attention_interval", c.full_attention_interval);
  if (c.is_moe()) {
    u32("expert_count", c.num_experts);
    u32("expert_used_count", c.num_experts_used);
    u32("expert_feed_forward_length", c.expert_ffn_dim);
    u32("expert_shared_feed_forward_length", c.shared_ffn_dim);
  } else {
    u32("feed_forward_length", c.ffn_dim);
  }
  return m;
}

}  // namespace deltaserve::runtime
