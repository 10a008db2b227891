// The weights of one model, bound by role, in the GGUF conventions whatever the source
// format: zero-centred norms hold (1 + w), ssm_a holds -exp(A_log), GDN value heads are in
// the tiled order (value head n reads key head n mod Hk), experts stacked [E][out][in].
// Matrices are ggml {in, out}: row o of a view is the o-th output's weights.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device_split.h"
#include "runtime/gguf_file.h"
#include "runtime/model_config.h"
#include "runtime/tensor_view.h"

namespace deltaserve::runtime {

struct AttentionWeights {
  TensorView q;       // {H, 2*nh*hd}: per head [query hd | gate hd]
  TensorView k, v;    // {H, nkv*hd}
  TensorView output;  // {nh*hd, H}
  TensorView q_norm, k_norm;  // {hd}, F32, hold (1 + w)
};

struct GdnWeights {
  TensorView qkv;     // {H, Dc}: q (Dk) | k (Dk) | v (Dv, tiled heads)
  TensorView gate;    // {H, Dv}: z
  TensorView beta;    // {H, Hv}
  TensorView alpha;   // {H, Hv}
  TensorView conv;    // {Kc, Dc}, F32: row c = taps of channel c, oldest first
  TensorView dt_bias; // {Hv}, F32
  TensorView a;       // {Hv}, F32: -exp(A_log)
  TensorView norm;    // {dv}, F32, plain weight (not 1 + w)
  TensorView output;  // {Dv, H}
};

struct FfnWeights {
  // Dense.
  TensorView gate, up;  // {H, I}
  TensorView down;      // {I, H}
  // MoE.
  TensorView router;                   // {H, E}, F32
  TensorView gate_exps, up_exps;       // {H, Ie, E}
  TensorView down_exps;                // {Ie, H, E}
  TensorView shared_gate_inp;          // {H}, F32: sigmoid gate of the shared expert
  TensorView gate_shexp, up_shexp;     // {H, Is}
  TensorView down_shexp;               // {Is, H}
};

struct LayerWeights {
  LayerKind kind = LayerKind::GatedDeltaNet;
  TensorView attn_norm;            // {H}, (1 + w)
  TensorView post_attention_norm;  // {H}, (1 + w)
  AttentionWeights attention;      // kind == Attention (and the MTP block)
  GdnWeights gdn;                  // kind == GatedDeltaNet
  FfnWeights ffn;
};

struct MtpWeights {
  TensorView eh_proj;           // {2H, H}: input = [enorm(embedding) | hnorm(hidden)]
  TensorView enorm, hnorm;      // {H}, (1 + w)
  TensorView shared_head_norm;  // {H}, (1 + w)
  LayerWeights layer;           // a full-attention block with the trunk's FFN type
};

struct ModelWeights {
  TensorView token_embd;   // {H, V}
  TensorView output_norm;  // {H}, (1 + w)
  TensorView output;       // {H, V}; token_embd when the embeddings are tied
  std::vector<LayerWeights> layers;  // num_layers trunk layers
  bool has_mtp = false;
  MtpWeights mtp;
};

// A model file opened and bound: config, weights by role, and what owns the bytes.
struct LoadedModel {
  std::string path;
  std::string format;  // "gguf" or "hf"
  ModelConfig config;
  ModelWeights weights;
  std::map<std::string, TensorView> tensors;  // every tensor by GGUF name
  std::string chat_template;                  // may be empty
  std::unique_ptr<GgufFile> gguf;             // set for GGUF files (tokenizer metadata)
  std::string tokenizer_json_path;            // set for HF directories
  std::vector<std::vector<std::byte>> owned_buffers;  // converted HF tensors
  std::vector<std::shared_ptr<void>> mappings;        // other mapped files (safetensors)
};

// Weight bytes by where a layer split puts them (runtime/layer_split_backend.h): one trunk
// layer; the first device's head (the token embedding); the last device's tail (final norm,
// LM head, MTP head; the MTP head reads the embedding too, counted with the head).
int64_t layer_weight_bytes(const LayerWeights& layer);
int64_t head_weight_bytes(const ModelWeights& weights);
int64_t tail_weight_bytes(const ModelWeights& weights);
// Every weight byte a backend holding trunk layers [first, end) reads (head and tail included
// where the range starts at 0 / ends at the last layer).
int64_t range_weight_bytes(const ModelWeights& weights, LayerRange layers);

// Opens a GGUF file or an HF directory (config.json + *.safetensors + tokenizer.json).
// Throws std::runtime_error with one clear line: the file, the key or tensor, what is wrong
// (missing tensor, wrong shape or type, unsupported architecture, bad hyperparameter).
std::unique_ptr<LoadedModel> load_model(const std::string& path);

// Binds and checks every tensor the config requires (used by both loaders).
ModelWeights bind_weights(const ModelConfig& config,
                          const std::map<std::string, TensorView>& tensors,
                          const std::string& source);

}  // namespace deltaserve::runtime
