// Test-only: a complete tiny qwen35 / qwen35moe GGUF (real metadata keys, MODEL.md 5.2 and
// 5.3, MTP block included) with seeded random F32 weights, as a GgufWriter that tests can
// then corrupt.
#pragma once

#include <random>
#include <string>

#include "tests/runtime/gguf_writer.h"

namespace deltaserve::testing {

struct TinySpec {
  bool moe = false;
  bool mtp = true;
  bool tied = false;
  bool fused_gate_up = false;
  uint32_t matrix_type = 0;  // ggml id for matrices (0 = F32, 1 = F16)
  uint64_t H = 64, L = 4, V = 96, nh = 4, nkv = 2, hd = 16, rope = 8;
  uint64_t Hk = 2, Hv = 4, d = 16, Kc = 4, interval = 4;
  uint64_t I = 96, E = 4, k = 2, Ie = 32, Is = 32;
  uint32_t seed = 1234;
};

inline std::string arch_name(const TinySpec& s) { return s.moe ? "qwen35moe" : "qwen35"; }

inline void add_metadata(GgufWriter& w, const TinySpec& s) {
  const std::string a = arch_name(s) + ".";
  w.add_string("general.architecture", arch_name(s));
  w.add_string("general.name", "tiny " + arch_name(s));
  w.add_u32(a + "block_count", static_cast<uint32_t>(s.L + (s.mtp ? 1 : 0)));
  if (s.mtp) w.add_u32(a + "nextn_predict_layers", 1);
  w.add_u32(a + "context_length", 4096);
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(s.H));
  if (!s.moe) w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(s.I));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(s.nh));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.nkv));
  w.add_u32(a + "attention.key_length", static_cast<uint32_t>(s.hd));
  w.add_u32(a + "attention.value_length", static_cast<uint32_t>(s.hd));
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(a + "rope.freq_base", 1e7f);
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.rope));
  w.add_i32_array(a + "rope.dimension_sections", {2, 1, 1, 0});
  w.add_u32(a + "full_attention_interval", static_cast<uint32_t>(s.interval));
  w.add_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.Kc));
  w.add_u32(a + "ssm.state_size", static_cast<uint32_t>(s.d));
  w.add_u32(a + "ssm.group_count", static_cast<uint32_t>(s.Hk));
  w.add_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.Hv));
  w.add_u32(a + "ssm.inner_size", static_cast<uint32_t>(s.Hv * s.d));
  if (s.moe) {
    w.add_u32(a + "expert_count", static_cast<uint32_t>(s.E));
    w.add_u32(a + "expert_used_count", static_cast<uint32_t>(s.k));
    w.add_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.Ie));
    w.add_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.Is));
  }
  w.add_u32("general.quantization_version", 2);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen35");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (uint64_t i = 0; i < s.V; ++i) {
    tokens.push_back("tok" + std::to_string(i));
    types.push_back(1);
  }
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_string("tokenizer.chat_template", "{{ messages }}");
}

class TinyTensorMaker {
 public:
  TinyTensorMaker(GgufWriter& w, const TinySpec& s) : w_(w), s_(s), rng_(s.seed) {}

  void f32(const std::string& name, std::vector<uint64_t> ne) { add(name, 0, std::move(ne)); }
  void matrix(const std::string& name, std::vector<uint64_t> ne) { add(name, s_.matrix_type, std::move(ne)); }

  void add(const std::string& name, uint32_t type, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t x : ne) n *= x;
    Bytes data(n * (type == 0 ? 4 : 2));
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (uint64_t i = 0; i < n; ++i) {
      const float v = dist(rng_);
      if (type == 0) {
        std::memcpy(data.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = static_cast<uint16_t>(0x3000u + (rng_() & 0x7ffu));  // small F16
        std::memcpy(data.data() + 2 * i, &h, 2);
      }
    }
    w_.add_tensor(name, type, std::move(ne), std::move(data));
  }

 private:
  GgufWriter& w_;
  const TinySpec& s_;
  std::mt19937 rng_;
};

inline void add_block_tensors(TinyTensorMaker& m, const TinySpec& s, uint64_t i, bool attention) {
  const std::string p = "blk." + std::to_string(i) + ".";
  const uint64_t Dk = s.Hk * s.d, Dv = s.Hv * s.d, Dc = 2 * Dk + Dv;
  m.f32(p + "attn_norm.weight", {s.H});
  m.f32(p + "post_attention_norm.weight", {s.H});
  if (attention) {
    m.matrix(p + "attn_q.weight", {s.H, 2 * s.nh * s.hd});
    m.matrix(p + "attn_k.weight", {s.H, s.nkv * s.hd});
    m.matrix(p + "attn_v.weight", {s.H, s.nkv * s.hd});
    m.matrix(p + "attn_output.weight", {s.nh * s.hd, s.H});
    m.f32(p + "attn_q_norm.weight", {s.hd});
    m.f32(p + "attn_k_norm.weight", {s.hd});
  } else {
    m.matrix(p + "attn_qkv.weight", {s.H, Dc});
    m.matrix(p + "attn_gate.weight", {s.H, Dv});
    m.matrix(p + "ssm_beta.weight", {s.H, s.Hv});
    m.matrix(p + "ssm_alpha.weight", {s.H, s.Hv});
    m.f32(p + "ssm_conv1d.weight", {s.Kc, Dc});
    m.f32(p + "ssm_dt.bias", {s.Hv});
    m.f32(p + "ssm_a", {s.Hv});
    m.f32(p + "ssm_norm.weight", {s.d});
    m.matrix(p + "ssm_out.weight", {Dv, s.H});
  }
  if (!s.moe) {
    m.matrix(p + "ffn_gate.weight", {s.H, s.I});
    m.matrix(p + "ffn_up.weight", {s.H, s.I});
    m.matrix(p + "ffn_down.weight", {s.I, s.H});
    return;
  }
  m.f32(p + "ffn_gate_inp.weight", {s.H, s.E});
  if (s.fused_gate_up) {
    m.matrix(p + "ffn_gate_up_exps.weight", {s.H, 2 * s.Ie, s.E});
  } else {
    m.matrix(p + "ffn_gate_exps.weight", {s.H, s.Ie, s.E});
    m.matrix(p + "ffn_up_exps.weight", {s.H, s.Ie, s.E});
  }
  m.matrix(p + "ffn_down_exps.weight", {s.Ie, s.H, s.E});
  m.f32(p + "ffn_gate_inp_shexp.weight", {s.H});
  m.matrix(p + "ffn_gate_shexp.weight", {s.H, s.Is});
  m.matrix(p + "ffn_up_shexp.weight", {s.H, s.Is});
  m.matrix(p + "ffn_down_shexp.weight", {s.Is, s.H});
}

inline GgufWriter make_tiny_gguf(const TinySpec& s) {
  GgufWriter w;
  add_metadata(w, s);
  TinyTensorMaker m(w, s);
  m.matrix("token_embd.weight", {s.H, s.V});
  m.f32("output_norm.weight", {s.H});
  if (!s.tied) m.matrix("output.weight", {s.H, s.V});
  for (uint64_t i = 0; i < s.L; ++i) add_block_tensors(m, s, i, (i + 1) % s.interval == 0);
  if (s.mtp) {
    const std::string p = "blk." + std::to_string(s.L) + ".nextn.";
    m.matrix(p + "eh_proj.weight", {2 * s.H, s.H});
    m.f32(p + "enorm.weight", {s.H});
    m.f32(p + "hnorm.weight", {s.H});
    m.f32(p + "shared_head_norm.weight", {s.H});
    add_block_tensors(m, s, s.L, true);
  }
  return w;
}

}  // namespace deltaserve::testing
