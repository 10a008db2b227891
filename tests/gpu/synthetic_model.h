// In-memory Qwen3.5 hybrids with random weights and shapes the GPU kernels take (GDN head dim
// 64, attention head dim 64), for the GPU backend tests: the tiny fixtures under
// tests/fixtures use GDN head dim 16, which gdn_step_gpu does not take. Matrices in any
// weight type (quantised through kernels::quantize_row), norms and GDN vectors in F32, the
// MoE gate/up experts as one fused ffn_gate_up_exps tensor (strided views, as GGUF files
// from newer converters have them). Deterministic for a seed.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "runtime/model_weights.h"

namespace deltaserve::testing {

inline runtime::ModelConfig synthetic_config(bool moe) {
  runtime::ModelConfig c;
  c.arch = moe ? runtime::Architecture::Moe : runtime::Architecture::Dense;
  c.name = moe ? "synthetic-moe" : "synthetic-dense";
  c.num_vocab = 512;
  c.num_embd = 256;
  c.num_layers = 4;
  c.num_mtp_layers = 1;
  c.context_length = 4096;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.rope_dims = 16;
  c.conv_kernel = 4;
  c.ssm_k_heads = 2;
  c.ssm_v_heads = 4;
  c.ssm_head_dim = 64;
  c.full_attention_interval = 4;
  c.layer_kinds = runtime::layer_kinds_from_interval(c.num_layers, c.full_attention_interval);
  c.ffn_dim = 512;
  if (moe) {
    c.num_experts = 8;
    c.num_experts_used = 2;
    c.expert_ffn_dim = 256;
    c.shared_ffn_dim = 256;
  }
  runtime::validate(c);
  return c;
}

class SyntheticModelBuilder {
 public:
  SyntheticModelBuilder(bool moe, kernels::DType matrix_type, uint32_t seed)
      : model_(std::make_unique<runtime::LoadedModel>()), type_(matrix_type), rng_(seed) {
    model_->path = "synthetic";
    model_->format = "synthetic";
    model_->config = synthetic_config(moe);
  }

  std::unique_ptr<runtime::LoadedModel> build() {
    const runtime::ModelConfig& c = model_->config;
    const int64_t H = c.num_embd, V = c.num_vocab;
    matrix("token_embd.weight", H, V, 1, 1.0f);
    vector("output_norm.weight", H, 1.0f, 0.1f);
    matrix("output.weight", H, V, 1, 1.0f / std::sqrt(static_cast<float>(H)));
    for (int64_t i = 0; i < c.num_layers; ++i) layer(i, c.layer_kinds[static_cast<size_t>(i)]);
    const std::string p = "blk." + std::to_string(c.num_layers) + ".nextn.";
    matrix(p + "eh_proj.weight", 2 * H, H, 1, 1.0f / std::sqrt(static_cast<float>(2 * H)));
    vector(p + "enorm.weight", H, 1.0f, 0.1f);
    vector(p + "hnorm.weight", H, 1.0f, 0.1f);
    vector(p + "shared_head_norm.weight", H, 1.0f, 0.1f);
    layer(c.num_layers, runtime::LayerKind::Attention);
    model_->weights = runtime::bind_weights(c, model_->tensors, "synthetic");
    return std::move(model_);
  }

 private:
  float uniform() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng_); }

  runtime::TensorView& add(const std::string& name, kernels::DType type, int64_t ne0, int64_t ne1, int64_t ne2,
                           const std::vector<float>& values) {
    const size_t row_bytes = kernels::dtype_row_bytes(type, ne0);
    std::vector<std::byte> bytes(row_bytes * static_cast<size_t>(ne1 * ne2));
    for (int64_t r = 0; r < ne1 * ne2; ++r) {
      if (type == kernels::DType::F32) {
        std::memcpy(bytes.data() + r * row_bytes, values.data() + r * ne0, row_bytes);
      } else {
        kernels::quantize_row(type, values.data() + r * ne0, bytes.data() + r * row_bytes, ne0);
      }
    }
    model_->owned_buffers.push_back(std::move(bytes));
    runtime::TensorView t;
    t.name = name;
    t.type = type;
    t.num_dims = ne2 > 1 ? 3 : (ne1 > 1 ? 2 : 1);
    t.ne = {ne0, ne1, ne2, 1};
    t.data = model_->owned_buffers.back().data();
    t.num_bytes = model_->owned_buffers.back().size();
    return model_->tensors[name] = t;
  }
  void matrix(const std::string& name, int64_t ne0, int64_t ne1, int64_t ne2, float scale) {
    std::vector<float> v(static_cast<size_t>(ne0 * ne1 * ne2));
    for (float& x : v) x = scale * uniform();
    add(name, type_, ne0, ne1, ne2, v);
  }
  void vector(const std::string& name, int64_t n, float center, float spread, int64_t ne1 = 1) {
    std::vector<float> v(static_cast<size_t>(n * ne1));
    for (float& x : v) x = center + spread * uniform();
    add(name, kernels::DType::F32, n, ne1, 1, v);
  }

  void layer(int64_t index, runtime::LayerKind kind) {
    const runtime::ModelConfig& c = model_->config;
    const int64_t H = c.num_embd, hd = c.head_dim;
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(H));
    const std::string p = "blk." + std::to_string(index) + ".";
    vector(p + "attn_norm.weight", H, 1.0f, 0.1f);
    vector(p + "post_attention_norm.weight", H, 1.0f, 0.1f);
    if (kind == runtime::LayerKind::Attention) {
      matrix(p + "attn_q.weight", H, 2 * c.num_heads * hd, 1, in_scale);
      matrix(p + "attn_k.weight", H, c.num_kv_heads * hd, 1, in_scale);
      matrix(p + "attn_v.weight", H, c.num_kv_heads * hd, 1, in_scale);
      matrix(p + "attn_output.weight", c.num_heads * hd, H, 1, 0.5f / std::sqrt(static_cast<float>(c.num_heads * hd)));
      vector(p + "attn_q_norm.weight", hd, 1.0f, 0.1f);
      vector(p + "attn_k_norm.weight", hd, 1.0f, 0.1f);
    } else {
      const int64_t Dc = c.conv_channels(), Dv = c.ssm_value_dim(), Hv = c.ssm_v_heads;
      matrix(p + "attn_qkv.weight", H, Dc, 1, in_scale);
      matrix(p + "attn_gate.weight", H, Dv, 1, in_scale);
      matrix(p + "ssm_beta.weight", H, Hv, 1, in_scale);
      matrix(p + "ssm_alpha.weight", H, Hv, 1, in_scale);
      vector(p + "ssm_conv1d.weight", c.conv_kernel, 0.0f, 0.5f, Dc);
      vector(p + "ssm_dt.bias", Hv, 0.0f, 0.5f);
      std::vector<float> a(static_cast<size_t>(Hv));
      for (float& x : a) x = -std::exp(0.5f * uniform());
      add(p + "ssm_a", kernels::DType::F32, Hv, 1, 1, a);
      vector(p + "ssm_norm.weight", c.ssm_head_dim, 1.0f, 0.1f);
      matrix(p + "ssm_out.weight", Dv, H, 1, 0.5f / std::sqrt(static_cast<float>(Dv)));
    }
    if (!c.is_moe()) {
      matrix(p + "ffn_gate.weight", H, c.ffn_dim, 1, in_scale);
      matrix(p + "ffn_up.weight", H, c.ffn_dim, 1, in_scale);
      matrix(p + "ffn_down.weight", c.ffn_dim, H, 1, 0.5f / std::sqrt(static_cast<float>(c.ffn_dim)));
      return;
    }
    const int64_t E = c.num_experts, Ie = c.expert_ffn_dim, Is = c.shared_ffn_dim;
    vector(p + "ffn_gate_inp.weight", H, 0.0f, in_scale, E);  // router, F32
    matrix(p + "ffn_gate_up_exps.weight", H, 2 * Ie, E, in_scale);
    matrix(p + "ffn_down_exps.weight", Ie, H, E, 0.5f / std::sqrt(static_cast<float>(Ie)));
    vector(p + "ffn_gate_inp_shexp.weight", H, 0.0f, in_scale);
    matrix(p + "ffn_gate_shexp.weight", H, Is, 1, in_scale);
    matrix(p + "ffn_up_shexp.weight", H, Is, 1, in_scale);
    matrix(p + "ffn_down_shexp.weight", Is, H, 1, 0.5f / std::sqrt(static_cast<float>(Is)));
  }

  std::unique_ptr<runtime::LoadedModel> model_;
  kernels::DType type_;
  std::mt19937 rng_;
};

inline std::unique_ptr<runtime::LoadedModel> make_synthetic_model(bool moe, kernels::DType matrix_type, uint32_t seed) {
  return SyntheticModelBuilder(moe, matrix_type, seed).build();
}

}  // namespace deltaserve::testing
