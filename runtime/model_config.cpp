#include "runtime/model_config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace deltaserve::runtime {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

void check_range(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    fail(std::string(field) + " = " + std::to_string(value) + " is outside [" +
         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

void check_multiple(const char* a_field, int64_t a, const char* b_field, int64_t b) {
  if (a % b != 0) {
    fail(std::string(a_field) + " (" + std::to_string(a) + ") is not a multiple of " + b_field +
         " (" + std::to_string(b) + ")");
  }
}

void validate_ffn(const ModelConfig& c) {
  if (!c.is_moe()) {
    check_range("ffn_dim", c.ffn_dim, 1, kMaxModelDim);
    return;
  }
  check_range("num_experts", c.num_experts, 1, 1 << 16);
  check_range("num_experts_used", c.num_experts_used, 1, c.num_experts);
  check_range("expert_ffn_dim", c.expert_ffn_dim, 1, kMaxModelDim);
  check_range("shared_ffn_dim", c.shared_ffn_dim, 1, kMaxModelDim);
}

}  // namespace

int64_t ModelConfig::num_attention_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::Attention);
}

std::vector<LayerKind> layer_kinds_from_interval(int64_t num_layers, int64_t interval) {
  check_range("num_layers", num_layers, 1, kMaxModelLayers);
  check_range("full_attention_interval", interval, 1, kMaxModelLayers);
  std::vector<LayerKind> kinds(static_cast<size_t>(num_layers), LayerKind::GatedDeltaNet);
  for (int64_t i = 0; i < num_layers; ++i) {
    if ((i + 1) % interval == 0) kinds[static_cast<size_t>(i)] = LayerKind::Attention;
  }
  return kinds;
}

void validate(const ModelConfig& c) {
  check_range("num_vocab", c.num_vocab, 1, kMaxModelDim);
  check_range("num_embd", c.num_embd, 1, kMaxModelDim);
  check_range("num_layers", c.num_layers, 1, kMaxModelLayers);
  check_range("num_mtp_layers", c.num_mtp_layers, 0, 1);
  check_range("context_length", c.context_length, 1, int64_t{1} << 32);
  if (!std::isfinite(c.rms_eps) || c.rms_eps <= 0.0f || c.rms_eps > 1.0f) {
    fail("rms_eps = " + std::to_string(c.rms_eps) + " is not in (0, 1]");
  }
  if (static_cast<int64_t>(c.layer_kinds.size()) != c.num_layers) {
    fail("layer_kinds has " + std::to_string(c.layer_kinds.size()) + " entries, expected " +
         std::to_string(c.num_layers) + " (num_layers)");
  }

  check_range("num_heads", c.num_heads, 1, 1 << 16);
  check_range("num_kv_heads", c.num_kv_heads, 1, c.num_heads);
  check_multiple("num_heads", c.num_heads, "num_kv_heads", c.num_kv_heads);
  check_range("head_dim", c.head_dim, 1, 1 << 16);
  check_range("rope_dims", c.rope_dims, 2, c.head_dim);
  check_multiple("rope_dims", c.rope_dims, "2", 2);
  if (!std::isfinite(c.rope_base) || c.rope_base <= 1.0f) {
    fail("rope_base = " + std::to_string(c.rope_base) + " must be finite and > 1");
  }

  check_range("conv_kernel", c.conv_kernel, 1, 64);
  check_range("ssm_k_heads", c.ssm_k_heads, 1, 1 << 16);
  check_range("ssm_v_heads", c.ssm_v_heads, 1, 1 << 16);
  check_multiple("ssm_v_heads", c.ssm_v_heads, "ssm_k_heads", c.ssm_k_heads);
  check_range("ssm_head_dim", c.ssm_head_dim, 1, 1 << 16);
  check_range("full_attention_interval", c.full_attention_interval, 1, kMaxModelLayers);

  validate_ffn(c);
  check_range("bos_token", c.bos_token, -1, c.num_vocab - 1);
  check_range("eos_token", c.eos_token, -1, c.num_vocab - 1);
}

}  // namespace deltaserve::runtime
