// The model's weights on the device: every tensor the forward uses (trunk, LM head, MTP head)
// uploaded once at start into one device allocation, in its file type (quantised types stay
// quantised; the kernels decode them). Views into fused tensors (the halves of a fused
// ffn_gate_up_exps) become contiguous device tensors, as matmul_experts_gpu requires.
// Tied embeddings are uploaded once. Same role structure as runtime/model_weights.h.
// Owner: GpuBackend; read-only after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/gpu/device_arena.h"
#include "runtime/model_weights.h"
#include "runtime/upload_progress.h"

namespace deltaserve::runtime::gpu {

struct DeviceTensor {
  std::string name;
  kernels::DType type = kernels::DType::F32;
  int64_t ne0 = 0, ne1 = 1, ne2 = 1;  // elements per row, rows (outputs), slices (experts)
  size_t row_bytes = 0;
  const std::byte* data = nullptr;    // device; null when the model has no such tensor
  const float* f32() const { return reinterpret_cast<const float*>(data); }
};

struct GpuAttentionWeights {
  DeviceTensor q, k, v, output, q_norm, k_norm;
};
struct GpuGdnWeights {
  DeviceTensor qkv, gate, beta, alpha, conv, dt_bias, a, norm, output;
};
struct GpuFfnWeights {
  DeviceTensor gate, up, down;
  DeviceTensor router, gate_exps, up_exps, down_exps, shared_gate_inp, gate_shexp, up_shexp, down_shexp;
};
struct GpuLayerWeights {
  LayerKind kind = LayerKind::GatedDeltaNet;
  DeviceTensor attn_norm, post_attention_norm;
  GpuAttentionWeights attention;
  GpuGdnWeights gdn;
  GpuFfnWeights ffn;
};
struct GpuMtpWeights {
  DeviceTensor eh_proj, enorm, hnorm, shared_head_norm;
  GpuLayerWeights layer;
};

class GpuWeights {
 public:
  // Uploads (blocking). Throws std::runtime_error naming the tensor when its type or shape
  // has no GPU kernel (e.g. a Q3_K or IQ matrix, a non-F32 norm, rows not a multiple of 8), or when
  // the device cannot hold the weights.
  // progress: lines for an upload of 1 GB or more (UploadProgress, every 10%); none if empty.
  GpuWeights(const ModelConfig& config, const ModelWeights& weights, const UploadProgress::Sink& progress = {});

  DeviceTensor token_embd, output_norm, output;
  std::vector<GpuLayerWeights> layers;
  bool has_mtp = false;
  GpuMtpWeights mtp;

  size_t bytes() const { return arena_.bytes(); }

 private:
  enum class Role { Matrix, Vector, Embedding };
  struct Pending {
    const TensorView* view;
    DeviceTensor* dst;
    size_t offset;
  };
  void add(const TensorView& view, DeviceTensor& dst, Role role);
  void add_layer(const LayerWeights& lw, GpuLayerWeights& dst, bool moe);

  DeviceArena arena_{"weights"};
  std::vector<Pending> pending_;
};

}  // namespace deltaserve::runtime::gpu
