#include "runtime/gpu/gpu_weights.h"

#include <stdexcept>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::runtime::gpu {
namespace {

bool matmul_type(kernels::DType t) {
  using kernels::DType;
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

[[noreturn]] void unsupported(const TensorView& v, const std::string& why) {
  throw std::runtime_error("GPU backend: tensor " + v.name + " (" + std::string(kernels::dtype_name(v.type)) + ", " +
                           std::to_string(v.ne[0]) + " x " + std::to_string(v.ne[1]) + "): " + why);
}

void check_role(const TensorView& v, bool vector, bool embedding) {
  if (v.ne[3] != 1) unsupported(v, "4-D tensors are not supported");
  if (vector) {
    if (v.type != kernels::DType::F32) unsupported(v, "the GPU kernels read this tensor as F32");
    return;
  }
  if (!matmul_type(v.type))
    unsupported(v, std::string(embedding ? "embedding" : "matmul") +
                       " weight type has no GPU kernel yet (GPU types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
  const int64_t block = kernels::dtype_traits(v.type).block_elements;
  if (v.ne[0] % 8 != 0 || v.ne[0] % block != 0)
    unsupported(v, "rows must be a multiple of 8 elements and of the type's block for the GPU kernels");
}

}  // namespace

void GpuWeights::add(const TensorView& view, DeviceTensor& dst, Role role) {
  if (view.data == nullptr) return;  // a role this model does not have (dense vs MoE)
  check_role(view, role == Role::Vector, role == Role::Embedding);
  dst.name = view.name;
  dst.type = view.type;
  dst.ne0 = view.ne[0];
  dst.ne1 = view.ne[1];
  dst.ne2 = view.ne[2];
  dst.row_bytes = view.row_bytes();
  // Tied embeddings: the LM head views the embedding's bytes; upload them once.
  for (const Pending& p : pending_) {
    if (p.view->data == view.data && p.view->type == view.type && p.view->ne == view.ne &&
        p.view->slice_stride() == view.slice_stride()) {
      pending_.push_back({&view, &dst, p.offset});
      return;
    }
  }
  const size_t bytes = static_cast<size_t>(view.ne[1] * view.ne[2]) * view.row_bytes();
  pending_.push_back({&view, &dst, arena_.reserve(bytes)});
}

void GpuWeights::add_layer(const LayerWeights& lw, GpuLayerWeights& dst, bool moe) {
  dst.kind = lw.kind;
  add(lw.attn_norm, dst.attn_norm, Role::Vector);
  add(lw.post_attention_norm, dst.post_attention_norm, Role::Vector);
  if (lw.kind == LayerKind::Attention) {
    const AttentionWeights& a = lw.attention;
    GpuAttentionWeights& d = dst.attention;
    add(a.q, d.q, Role::Matrix);
    add(a.k, d.k, Role::Matrix);
    add(a.v, d.v, Role::Matrix);
    add(a.output, d.output, Role::Matrix);
    add(a.q_norm, d.q_norm, Role::Vector);
    add(a.k_norm, d.k_norm, Role::Vector);
  } else {
    const GdnWeights& g = lw.gdn;
    GpuGdnWeights& d = dst.gdn;
    add(g.qkv, d.qkv, Role::Matrix);
    add(g.gate, d.gate, Role::Matrix);
    add(g.beta, d.beta, Role::Matrix);
    add(g.alpha, d.alpha, Role::Matrix);
    add(g.conv, d.conv, Role::Vector);
    add(g.dt_bias, d.dt_bias, Role::Vector);
    add(g.a, d.a, Role::Vector);
    add(g.norm, d.norm, Role::Vector);
    add(g.output, d.output, Role::Matrix);
  }
  const FfnWeights& f = lw.ffn;
  GpuFfnWeights& d = dst.ffn;
  if (moe) {
    add(f.router, d.router, Role::Matrix);
    add(f.gate_exps, d.gate_exps, Role::Matrix);
    add(f.up_exps, d.up_exps, Role::Matrix);
    add(f.down_exps, d.down_exps, Role::Matrix);
    add(f.shared_gate_inp, d.shared_gate_inp, Role::Matrix);  // a 1-output F32 matrix
    add(f.gate_shexp, d.gate_shexp, Role::Matrix);
    add(f.up_shexp, d.up_shexp, Role::Matrix);
    add(f.down_shexp, d.down_shexp, Role::Matrix);
  } else {
    add(f.gate, d.gate, Role::Matrix);
    add(f.up, d.up, Role::Matrix);
    add(f.down, d.down, Role::Matrix);
  }
}

GpuWeights::GpuWeights(const ModelConfig& config, const ModelWeights& weights, const UploadProgress::Sink& progress) {
  const bool moe = config.is_moe();
  add(weights.token_embd, token_embd, Role::Embedding);
  add(weights.output_norm, output_norm, Role::Vector);
  add(weights.output, output, Role::Matrix);
  layers.resize(weights.layers.size());
  for (size_t i = 0; i < weights.layers.size(); ++i) add_layer(weights.layers[i], layers[i], moe);
  has_mtp = weights.has_mtp;
  if (has_mtp) {
    add(weights.mtp.eh_proj, mtp.eh_proj, Role::Matrix);
    add(weights.mtp.enorm, mtp.enorm, Role::Vector);
    add(weights.mtp.hnorm, mtp.hnorm, Role::Vector);
    add(weights.mtp.shared_head_norm, mtp.shared_head_norm, Role::Vector);
    add_layer(weights.mtp.layer, mtp.layer, moe);
  }

  arena_.allocate();
  uint64_t total = 0;
  for (const Pending& p : pending_) total += static_cast<uint64_t>(p.view->ne[1]) * p.view->row_bytes() * p.view->ne[2];
  // Small models (tests, the embedded model) upload in well under a second: no lines.
  UploadProgress meter("uploading weights to the GPU", total, 10, total >= (uint64_t{1} << 30) ? progress : nullptr);
  for (const Pending& p : pending_) {
    const TensorView& v = *p.view;
    unsigned char* dst = arena_.at<unsigned char>(p.offset);
    p.dst->data = reinterpret_cast<const std::byte*>(dst);
    const size_t slice_bytes = static_cast<size_t>(v.ne[1]) * v.row_bytes();
    // Upload each expert slice (strided views of fused tensors); contiguous tensors in one go.
    const int64_t copies = v.is_contiguous() ? 1 : v.ne[2];
    const size_t copy_bytes = v.is_contiguous() ? slice_bytes * static_cast<size_t>(v.ne[2]) : slice_bytes;
    for (int64_t i = 0; i < copies; ++i)
      DS_GPU_CHECK(gpuMemcpy(dst + static_cast<size_t>(i) * slice_bytes, v.slice(i), copy_bytes, gpuMemcpyHostToDevice),
                   "upload %s, %zu bytes", v.name.c_str(), copy_bytes);
    meter.add(static_cast<uint64_t>(copies) * copy_bytes);
  }
  pending_.clear();
}

}  // namespace deltaserve::runtime::gpu
