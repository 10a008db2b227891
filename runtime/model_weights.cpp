// bind_weights: GGUF tensor names (MODEL.md 5.3) -> roles, with exact shape and type checks.
#include "runtime/model_weights.h"

#include <initializer_list>
#include <stdexcept>

namespace deltaserve::runtime {

namespace {

using Shape = std::array<int64_t, 4>;

std::string shape_string(const Shape& ne) {
  int num_dims = 4;
  while (num_dims > 1 && ne[num_dims - 1] == 1) --num_dims;
  std::string s = "{";
  for (int i = 0; i < num_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

Shape padded(std::initializer_list<int64_t> dims) {
  Shape ne{1, 1, 1, 1};
  size_t i = 0;
  for (int64_t d : dims) ne[i++] = d;
  return ne;
}

// Looks tensors up by name and checks them. Shapes compare as 4-d with trailing 1s (as
// llama.cpp does), so {H} and {H, 1} are the same shape.
class Binder {
 public:
  Binder(const std::map<std::string, TensorView>& tensors, const std::string& source)
      : tensors_(tensors), source_(source) {}

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  // Any supported type (matrices).
  TensorView matrix(const std::string& name, std::initializer_list<int64_t> shape) const {
    return get(name, padded(shape), false);
  }
  // Must be F32 (norms, conv, ssm_a, dt bias, router, shared-expert gate).
  TensorView f32(const std::string& name, std::initializer_list<int64_t> shape) const {
    return get(name, padded(shape), true);
  }

  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw std::runtime_error(source_ + ": tensor '" + name + "': " + what);
  }

 private:
  TensorView get(const std::string& name, const Shape& expected, bool need_f32) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) fail(name, "missing");
    const TensorView& t = it->second;
    if (t.ne != expected) {
      fail(name, "expected shape " + shape_string(expected) + ", got " + shape_string(t.ne));
    }
    if (need_f32 && t.type != kernels::DType::F32) {
      fail(name, "type " + std::string(kernels::dtype_name(t.type)) + " not allowed (must be F32)");
    }
    return t;
  }

  const std::map<std::string, TensorView>& tensors_;
  const std::string& source_;
};

AttentionWeights bind_attention(const Binder& b, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.num_embd, hd = c.head_dim;
  AttentionWeights w;
  w.q = b.matrix(p + "attn_q.weight", {H, 2 * c.num_heads * hd});
  w.k = b.matrix(p + "attn_k.weight", {H, c.num_kv_heads * hd});
  w.v = b.matrix(p + "attn_v.weight", {H, c.num_kv_heads * hd});
  w.output = b.matrix(p + "attn_output.weight", {c.num_heads * hd, H});
  w.q_norm = b.f32(p + "attn_q_norm.weight", {hd});
  w.k_norm = b.f32(p + "attn_k_norm.weight", {hd});
  return w;
}

GdnWeights bind_gdn(const Binder& b, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.num_embd, Dc = c.conv_channels(), Dv = c.ssm_value_dim();
  const int64_t Hv = c.ssm_v_heads;
  GdnWeights w;
  w.qkv = b.matrix(p + "attn_qkv.weight", {H, Dc});
  w.gate = b.matrix(p + "attn_gate.weight", {H, Dv});
  w.beta = b.matrix(p + "ssm_beta.weight", {H, Hv});
  w.alpha = b.matrix(p + "ssm_alpha.weight", {H, Hv});
  w.conv = b.f32(p + "ssm_conv1d.weight", {c.conv_kernel, Dc});
  w.dt_bias = b.f32(p + "ssm_dt.bias", {Hv});
  w.a = b.f32(p + "ssm_a", {Hv});
  w.norm = b.f32(p + "ssm_norm.weight", {c.ssm_head_dim});
  w.output = b.matrix(p + "ssm_out.weight", {Dv, H});
  return w;
}

// A fused {H, 2*Ie, E} tensor holds, per expert, Ie gate rows then Ie up rows; each half
// becomes a view whose experts are 2*Ie rows apart (TensorView::slice_stride_bytes).
void split_gate_up(const Binder& b, const std::string& name, const ModelConfig& c,
                   FfnWeights& w) {
  const int64_t H = c.num_embd, Ie = c.expert_ffn_dim, E = c.num_experts;
  const TensorView fused = b.matrix(name, {H, 2 * Ie, E});
  TensorView half = fused;
  half.ne[1] = Ie;
  half.slice_stride_bytes = fused.slice_stride();
  half.num_bytes = fused.num_bytes / 2;
  w.gate_exps = half;
  w.gate_exps.name = name + "[gate]";
  w.up_exps = half;
  w.up_exps.name = name + "[up]";
  w.up_exps.data = fused.data + static_cast<size_t>(Ie) * fused.row_bytes();
}

FfnWeights bind_ffn(const Binder& b, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.num_embd;
  FfnWeights w;
  if (!c.is_moe()) {
    w.gate = b.matrix(p + "ffn_gate.weight", {H, c.ffn_dim});
    w.up = b.matrix(p + "ffn_up.weight", {H, c.ffn_dim});
    w.down = b.matrix(p + "ffn_down.weight", {c.ffn_dim, H});
    return w;
  }
  const int64_t E = c.num_experts, Ie = c.expert_ffn_dim, Is = c.shared_ffn_dim;
  w.router = b.f32(p + "ffn_gate_inp.weight", {H, E});
  if (b.has(p + "ffn_gate_up_exps.weight")) {
    split_gate_up(b, p + "ffn_gate_up_exps.weight", c, w);
  } else {
    w.gate_exps = b.matrix(p + "ffn_gate_exps.weight", {H, Ie, E});
    w.up_exps = b.matrix(p + "ffn_up_exps.weight", {H, Ie, E});
  }
  w.down_exps = b.matrix(p + "ffn_down_exps.weight", {Ie, H, E});
  w.shared_gate_inp = b.f32(p + "ffn_gate_inp_shexp.weight", {H});
  w.gate_shexp = b.matrix(p + "ffn_gate_shexp.weight", {H, Is});
  w.up_shexp = b.matrix(p + "ffn_up_shexp.weight", {H, Is});
  w.down_shexp = b.matrix(p + "ffn_down_shexp.weight", {Is, H});
  return w;
}

LayerWeights bind_layer(const Binder& b, int64_t index, LayerKind kind, const ModelConfig& c) {
  const std::string p = "blk." + std::to_string(index) + ".";
  LayerWeights w;
  w.kind = kind;
  w.attn_norm = b.f32(p + "attn_norm.weight", {c.num_embd});
  w.post_attention_norm = b.f32(p + "post_attention_norm.weight", {c.num_embd});
  if (kind == LayerKind::Attention) {
    w.attention = bind_attention(b, p, c);
  } else {
    w.gdn = bind_gdn(b, p, c);
  }
  w.ffn = bind_ffn(b, p, c);
  return w;
}

MtpWeights bind_mtp(const Binder& b, const ModelConfig& c) {
  const int64_t H = c.num_embd, n = c.num_layers;
  const std::string p = "blk." + std::to_string(n) + ".nextn.";
  MtpWeights w;
  w.eh_proj = b.matrix(p + "eh_proj.weight", {2 * H, H});
  w.enorm = b.f32(p + "enorm.weight", {H});
  w.hnorm = b.f32(p + "hnorm.weight", {H});
  w.shared_head_norm = b.f32(p + "shared_head_norm.weight", {H});
  w.layer = bind_layer(b, n, LayerKind::Attention, c);
  return w;
}

}  // namespace

ModelWeights bind_weights(const ModelConfig& config,
                          const std::map<std::string, TensorView>& tensors,
                          const std::string& source) {
  const Binder b(tensors, source);
  const int64_t H = config.num_embd, V = config.num_vocab;
  ModelWeights w;
  w.token_embd = b.matrix("token_embd.weight", {H, V});
  w.output_norm = b.f32("output_norm.weight", {H});
  w.output = config.tied_embeddings ? w.token_embd : b.matrix("output.weight", {H, V});
  w.layers.reserve(config.layer_kinds.size());
  for (size_t i = 0; i < config.layer_kinds.size(); ++i) {
    w.layers.push_back(bind_layer(b, static_cast<int64_t>(i), config.layer_kinds[i], config));
  }
  w.has_mtp = config.num_mtp_layers > 0;
  if (w.has_mtp) w.mtp = bind_mtp(b, config);
  return w;
}

}  // namespace deltaserve::runtime
