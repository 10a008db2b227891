#include "runtime/hf_converter.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "kernels/float16.h"

namespace deltaserve::runtime {

enum class HfConverter::Transform {
  Skip,
  View,       // same bytes, renamed
  PlusOne,    // zero-centred norm: F32(w) + 1
  ToF32,      // F32(w)
  NegExp,     // A_log -> -exp(A_log), value heads reordered
  HeadsF32,   // dt_bias: F32, value heads reordered
  QkvRows,    // in_proj_qkv: V rows (after 2*Dk q/k rows) reordered in blocks of dv
  VRows,      // in_proj_z: rows reordered in blocks of dv
  HeadRows,   // in_proj_a / in_proj_b: one row per value head
  VColumns,   // out_proj: input columns reordered in blocks of dv
  Conv,       // conv1d [Dc, 1, Kc] -> F32 {Kc, Dc}, V channels reordered
  GateUp,     // experts.gate_up_proj [E, 2Ie, H] -> ffn_gate_exps + ffn_up_exps
  ExpertPart, // experts.{e}.{gate,up,down}_proj.weight, stacked into one {., ., E} tensor
};

struct HfConverter::Target {
  std::string gguf;  // GGUF name (the block prefix "blk.i." for GateUp)
  Transform transform = Transform::Skip;
  int64_t expert = -1;  // ExpertPart only
};

namespace {

using Transform = HfConverter::Transform;

struct BlockRule {
  std::string_view hf, gguf;
  Transform transform;
};

// HF names inside a decoder layer (model.layers.i. or mtp.layers.0.) -> GGUF names.
constexpr BlockRule kBlockRules[] = {
    {"input_layernorm.weight", "attn_norm.weight", Transform::PlusOne},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", Transform::PlusOne},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", Transform::QkvRows},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", Transform::VRows},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", Transform::HeadRows},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", Transform::HeadRows},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", Transform::Conv},
    {"linear_attn.dt_bias", "ssm_dt.bias", Transform::HeadsF32},
    {"linear_attn.A_log", "ssm_a", Transform::NegExp},
    {"linear_attn.norm.weight", "ssm_norm.weight", Transform::ToF32},  // plain w: no +1
    {"linear_attn.out_proj.weight", "ssm_out.weight", Transform::VColumns},
    {"self_attn.q_proj.weight", "attn_q.weight", Transform::View},
    {"self_attn.k_proj.weight", "attn_k.weight", Transform::View},
    {"self_attn.v_proj.weight", "attn_v.weight", Transform::View},
    {"self_attn.o_proj.weight", "attn_output.weight", Transform::View},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", Transform::PlusOne},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", Transform::PlusOne},
    {"mlp.gate_proj.weight", "ffn_gate.weight", Transform::View},
    {"mlp.up_proj.weight", "ffn_up.weight", Transform::View},
    {"mlp.down_proj.weight", "ffn_down.weight", Transform::View},
    {"mlp.gate.weight", "ffn_gate_inp.weight", Transform::ToF32},
    {"mlp.experts.gate_up_proj", "", Transform::GateUp},
    {"mlp.experts.gate_up_proj.weight", "", Transform::GateUp},
    {"mlp.experts.down_proj", "ffn_down_exps.weight", Transform::View},
    {"mlp.experts.down_proj.weight", "ffn_down_exps.weight", Transform::View},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", Transform::View},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", Transform::View},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", Transform::View},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", Transform::ToF32},
};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Parses the decimal index at the start of s up to the next '.', e.g. "12.mlp" -> 12.
std::optional<int64_t> leading_index(std::string_view s, std::string_view* rest) {
  const size_t dot = s.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 6) return std::nullopt;
  int64_t value = 0;
  for (char c : s.substr(0, dot)) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  *rest = s.substr(dot + 1);
  return value;
}

std::vector<float> to_f32(const TensorView& t) {
  const auto n = static_cast<size_t>(t.num_elements());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.type == kernels::DType::F32) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = t.type == kernels::DType::BF16 ? kernels::bf16_to_fp32(h) : kernels::fp16_to_fp32(h);
    }
  }
  return out;
}

std::string hf_shape(const std::array<int64_t, 4>& ne) {
  int num_dims = 4;
  while (num_dims > 1 && ne[num_dims - 1] == 1) --num_dims;
  std::string s = "[";
  for (int i = num_dims - 1; i >= 0; --i) s += std::to_string(ne[i]) + (i ? ", " : "");
  return s + "]";
}

}  // namespace

HfConverter::HfConverter(const ModelConfig& config, std::string source,
                         std::vector<std::vector<std::byte>>& owned)
    : config_(config), source_(std::move(source)), owned_(owned) {}

std::string HfConverter::normalize_name(const std::string& hf_name) {
  static constexpr std::string_view kPrefix = "model.language_model.";
  if (starts_with(hf_name, kPrefix)) return "model." + hf_name.substr(kPrefix.size());
  return hf_name;
}

void HfConverter::fail(const std::string& hf_name, const std::string& what) const {
  throw std::runtime_error(source_ + ": tensor '" + hf_name + "': " + what);
}

std::map<std::string, TensorView> HfConverter::convert(const std::map<std::string, TensorView>& hf_tensors) {
  for (const auto& [hf_name, view] : hf_tensors) {
    const Target target = map_name(normalize_name(hf_name));
    if (target.transform != Transform::Skip) add(hf_name, target, view);
  }
  stack_experts();
  return std::move(out_);
}

HfConverter::Target HfConverter::map_name(const std::string& name) const {
  if (starts_with(name, "model.visual.") || starts_with(name, "visual.") ||
      starts_with(name, "model.vision")) {
    return {};  // vision tower: a separate mmproj file in llama.cpp
  }
  if (name == "model.embed_tokens.weight") return {"token_embd.weight", Transform::View};
  if (name == "model.norm.weight") return {"output_norm.weight", Transform::PlusOne};
  if (name == "lm_head.weight") {
    return config_.tied_embeddings ? Target{} : Target{"output.weight", Transform::View};
  }
  std::string_view rest;
  std::string prefix;
  if (starts_with(name, "model.layers.")) {
    const auto i = leading_index(std::string_view(name).substr(13), &rest);
    if (!i || *i >= config_.num_layers) fail(name, "layer index out of range or malformed");
    prefix = "blk." + std::to_string(*i) + ".";
  } else if (starts_with(name, "mtp.")) {
    if (config_.num_mtp_layers == 0) return {};
    const std::string mtp = "blk." + std::to_string(config_.num_layers) + ".";
    if (name == "mtp.fc.weight") return {mtp + "nextn.eh_proj.weight", Transform::View};
    if (name == "mtp.pre_fc_norm_embedding.weight") return {mtp + "nextn.enorm.weight", Transform::PlusOne};
    if (name == "mtp.pre_fc_norm_hidden.weight") return {mtp + "nextn.hnorm.weight", Transform::PlusOne};
    if (name == "mtp.norm.weight") return {mtp + "nextn.shared_head_norm.weight", Transform::PlusOne};
    if (!starts_with(name, "mtp.layers.")) fail(name, "unknown MTP tensor");
    const auto k = leading_index(std::string_view(name).substr(11), &rest);
    if (!k || *k != 0) fail(name, "only one MTP layer (mtp.layers.0) is supported");
    prefix = mtp;
  } else {
    fail(name, "unknown tensor name (not a Qwen3.5 text-model tensor)");
  }
  for (const BlockRule& rule : kBlockRules) {
    if (rest == rule.hf) return {prefix + std::string(rule.gguf), rule.transform};
  }
  // Legacy per-expert names: mlp.experts.{e}.{gate,up,down}_proj.weight.
  if (starts_with(rest, "mlp.experts.")) {
    std::string_view part;
    const auto e = leading_index(rest.substr(12), &part);
    const char* stacked = part == "gate_proj.weight" ? "ffn_gate_exps.weight"
                          : part == "up_proj.weight" ? "ffn_up_exps.weight"
                          : part == "down_proj.weight" ? "ffn_down_exps.weight" : nullptr;
    if (e && stacked != nullptr) return {prefix + stacked, Transform::ExpertPart, *e};
  }
  fail(name, "unknown tensor name in a decoder layer");
}

void HfConverter::expect_shape(const std::string& hf_name, const TensorView& t,
                               std::array<int64_t, 4> ne) const {
  if (t.ne != ne) fail(hf_name, "expected shape " + hf_shape(ne) + ", got " + hf_shape(t.ne));
}

void HfConverter::put(const std::string& gguf_name, TensorView view) {
  view.name = gguf_name;
  if (!out_.emplace(gguf_name, std::move(view)).second) {
    throw std::runtime_error(source_ + ": tensor '" + gguf_name + "': produced twice (duplicate checkpoint names)");
  }
}

TensorView HfConverter::own(const std::string& name, const TensorView& like, std::vector<std::byte> bytes) {
  TensorView t = like;
  t.name = name;
  t.slice_stride_bytes = 0;
  t.num_bytes = bytes.size();
  owned_.push_back(std::move(bytes));
  t.data = owned_.back().data();  // a vector's heap block survives moves of owned_
  return t;
}

TensorView HfConverter::own_f32(const std::string& name, const TensorView& like,
                                const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  TensorView t = like;
  t.type = kernels::DType::F32;
  return own(name, t, std::move(bytes));
}

std::vector<std::byte> HfConverter::permute_rows(const std::byte* src, size_t row_bytes, int64_t num_rows,
                                                 int64_t first_row, int64_t rows_per_head) const {
  const int64_t Hk = config_.ssm_k_heads, r = config_.ssm_v_heads / Hk;
  std::vector<std::byte> out(src, src + static_cast<size_t>(num_rows) * row_bytes);
  const size_t block_bytes = static_cast<size_t>(rows_per_head) * row_bytes;
  for (int64_t n = 0; n < config_.ssm_v_heads; ++n) {
    const int64_t j = (n % Hk) * r + n / Hk;  // HF head j = kappa*r + rho -> GGUF n = rho*Hk + kappa
    std::memcpy(out.data() + static_cast<size_t>(first_row) * row_bytes + static_cast<size_t>(n) * block_bytes,
                src + static_cast<size_t>(first_row) * row_bytes + static_cast<size_t>(j) * block_bytes,
                block_bytes);
  }
  return out;
}

std::vector<std::byte> HfConverter::permute_columns(const TensorView& src, int64_t cols_per_head) const {
  const size_t elem_bytes = kernels::dtype_traits(src.type).block_bytes;
  std::vector<std::byte> out(src.num_bytes);
  for (int64_t row = 0; row < src.num_rows(); ++row) {
    const std::vector<std::byte> permuted =
        permute_rows(src.row(row), elem_bytes, src.ne[0], 0, cols_per_head);
    std::memcpy(out.data() + static_cast<size_t>(row) * src.row_bytes(), permuted.data(), permuted.size());
  }
  return out;
}

void HfConverter::add(const std::string& hf_name, const Target& target, const TensorView& src) {
  const ModelConfig& c = config_;
  const int64_t H = c.num_embd, Hv = c.ssm_v_heads, dv = c.ssm_head_dim;
  const int64_t Dk = c.ssm_key_dim(), Dv = c.ssm_value_dim(), Dc = c.conv_channels();
  switch (target.transform) {
    case Transform::Skip:
      return;
    case Transform::View: {
      // Kernels read elements in place: a view must be aligned for its element type.
      const size_t align = kernels::dtype_traits(src.type).block_bytes;
      if (reinterpret_cast<uintptr_t>(src.data) % align == 0) return put(target.gguf, src);
      return put(target.gguf, own(target.gguf, src, std::vector<std::byte>(src.data, src.data + src.num_bytes)));
    }
    case Transform::PlusOne: {
      std::vector<float> w = to_f32(src);
      for (float& x : w) x += 1.0f;
      return put(target.gguf, own_f32(target.gguf, src, w));
    }
    case Transform::ToF32:
      return put(target.gguf, own_f32(target.gguf, src, to_f32(src)));
    case Transform::NegExp:
    case Transform::HeadsF32: {
      expect_shape(hf_name, src, {Hv, 1, 1, 1});
      const std::vector<float> w = to_f32(src);
      const std::vector<std::byte> bytes =
          permute_rows(reinterpret_cast<const std::byte*>(w.data()), sizeof(float), Hv, 0, 1);
      std::vector<float> out(static_cast<size_t>(Hv));
      std::memcpy(out.data(), bytes.data(), bytes.size());
      if (target.transform == Transform::NegExp) {
        for (float& x : out) x = -std::exp(x);
      }
      return put(target.gguf, own_f32(target.gguf, src, out));
    }
    case Transform::QkvRows:
      expect_shape(hf_name, src, {H, Dc, 1, 1});
      return put(target.gguf, own(target.gguf, src, permute_rows(src.data, src.row_bytes(), Dc, 2 * Dk, dv)));
    case Transform::VRows:
      expect_shape(hf_name, src, {H, Dv, 1, 1});
      return put(target.gguf, own(target.gguf, src, permute_rows(src.data, src.row_bytes(), Dv, 0, dv)));
    case Transform::HeadRows:
      expect_shape(hf_name, src, {H, Hv, 1, 1});
      return put(target.gguf, own(target.gguf, src, permute_rows(src.data, src.row_bytes(), Hv, 0, 1)));
    case Transform::VColumns:
      expect_shape(hf_name, src, {Dv, H, 1, 1});
      return put(target.gguf, own(target.gguf, src, permute_columns(src, dv)));
    case Transform::Conv: {
      // HF [Dc, 1, Kc] (or already squeezed [Dc, Kc]); row c of the result = taps of channel c.
      if (src.ne != std::array<int64_t, 4>{c.conv_kernel, 1, Dc, 1}) {
        expect_shape(hf_name, src, {c.conv_kernel, Dc, 1, 1});
      }
      const std::vector<float> w = to_f32(src);
      const size_t row_bytes = static_cast<size_t>(c.conv_kernel) * sizeof(float);
      TensorView like = src;
      like.type = kernels::DType::F32;
      like.num_dims = 2;
      like.ne = {c.conv_kernel, Dc, 1, 1};
      return put(target.gguf, own(target.gguf, like,
                                  permute_rows(reinterpret_cast<const std::byte*>(w.data()), row_bytes, Dc, 2 * Dk, dv)));
    }
    case Transform::GateUp:
      return split_gate_up(hf_name, target, src);
    case Transform::ExpertPart:
      return add_expert_part(hf_name, target, src);
  }
}

// [E, 2*Ie, H]: per expert, Ie gate rows then Ie up rows (MODEL.md 5.4).
void HfConverter::split_gate_up(const std::string& hf_name, const Target& target, const TensorView& src) {
  const int64_t H = config_.num_embd, Ie = config_.expert_ffn_dim, E = config_.num_experts;
  if (!config_.is_moe()) fail(hf_name, "expert tensor in a dense model");
  expect_shape(hf_name, src, {H, 2 * Ie, E, 1});
  const size_t half_bytes = static_cast<size_t>(Ie) * src.row_bytes();
  std::vector<std::byte> gate(half_bytes * static_cast<size_t>(E)), up(gate.size());
  for (int64_t e = 0; e < E; ++e) {
    const std::byte* expert = src.data + 2 * half_bytes * static_cast<size_t>(e);
    std::memcpy(gate.data() + half_bytes * static_cast<size_t>(e), expert, half_bytes);
    std::memcpy(up.data() + half_bytes * static_cast<size_t>(e), expert + half_bytes, half_bytes);
  }
  TensorView like = src;
  like.ne[1] = Ie;
  put(target.gguf + "ffn_gate_exps.weight", own(target.gguf + "ffn_gate_exps.weight", like, std::move(gate)));
  put(target.gguf + "ffn_up_exps.weight", own(target.gguf + "ffn_up_exps.weight", like, std::move(up)));
}

void HfConverter::add_expert_part(const std::string& hf_name, const Target& target, const TensorView& src) {
  if (!config_.is_moe()) fail(hf_name, "expert tensor in a dense model");
  if (target.expert >= config_.num_experts) {
    fail(hf_name, "expert index " + std::to_string(target.expert) + " >= num_experts " +
                      std::to_string(config_.num_experts));
  }
  if (src.ne[2] != 1 || src.ne[3] != 1) fail(hf_name, "expected a 2-d expert matrix, got " + hf_shape(src.ne));
  std::vector<TensorView>& parts = expert_parts_[target.gguf];
  parts.resize(static_cast<size_t>(config_.num_experts));
  TensorView& slot = parts[static_cast<size_t>(target.expert)];
  if (slot.data != nullptr) fail(hf_name, "duplicate expert tensor");
  slot = src;
  slot.name = hf_name;
}

// Stacks experts.{e}.*_proj.weight [out, in] into one {in, out, E} tensor.
void HfConverter::stack_experts() {
  for (auto& [gguf_name, parts] : expert_parts_) {
    const TensorView* first = nullptr;
    for (size_t e = 0; e < parts.size(); ++e) {
      if (parts[e].data == nullptr) {
        throw std::runtime_error(source_ + ": tensor '" + gguf_name + "': expert " + std::to_string(e) +
                                 " is missing from the checkpoint");
      }
      if (first == nullptr) first = &parts[e];
      if (parts[e].ne != first->ne || parts[e].type != first->type) {
        fail(parts[e].name, "shape or dtype differs from " + first->name);
      }
    }
    std::vector<std::byte> bytes(first->num_bytes * parts.size());
    for (size_t e = 0; e < parts.size(); ++e) {
      std::memcpy(bytes.data() + e * first->num_bytes, parts[e].data, first->num_bytes);
    }
    TensorView like = *first;
    like.ne[2] = static_cast<int64_t>(parts.size());
    like.num_dims = 3;
    put(gguf_name, own(gguf_name, like, std::move(bytes)));
  }
  expert_parts_.clear();
}

}  // namespace deltaserve::runtime
