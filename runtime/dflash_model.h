// A DFlash block-diffusion draft model (z-lab's published format: a directory with
// config.json and model.safetensors), loaded into f32 host arrays for the CPU drafter
// (runtime/dflash_drafter.h).
//
// The model (docs/speculation.md, "DFlash"): the target's hidden states after the layers
// target_layer_ids (the residual stream after each, concatenated per position) go through
// fc ([H][n * H_target] -> H) and hidden_norm: one "context" row per known position. A block
// of block_size rows (the last emitted token, then mask_token_id) at the next positions runs
// through num_layers Qwen3 decoder layers whose attention is non-causal: every block row
// attends to every context row and every block row; context rows contribute keys and values
// only (k_proj/v_proj of the layer, k_norm, RoPE at their positions). The final norm and the
// target's LM head turn block row k >= 1 into the draft of position start + k. The token
// embedding and the LM head are the target's (not in the file).
//
// Supported: `DFlashDraftModel` (architectures) with full (non-causal) attention, no biases.
// Refused with a clear error: DFlash2 (dynamic convolutions and a candidate selector),
// sliding-window layers, causal blocks, shapes that disagree with config.json or the target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_config.h"

namespace deltaserve::runtime {

struct DFlashConfig {
  int64_t hidden = 0;          // H (equals the target's num_embd)
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  float rms_eps = 1e-6f;
  float rope_theta = 1e6f;
  int32_t block_size = 16;     // rows per block: the anchor and block_size - 1 drafts
  int32_t mask_token_id = -1;  // a row of the target's embedding table
  std::vector<int32_t> target_layer_ids;  // increasing trunk layer indices
  float output_multiplier = 1.0f;         // logits scale (1 unless the config says)
  float logit_softcap = 0.0f;             // tanh cap of the logits (0: none)
};

// Parses config.json text. Throws std::runtime_error "<source>: '<field>': <what>".
DFlashConfig parse_dflash_config(const std::string& json_text, const std::string& source);

struct DFlashLayer {
  std::vector<float> input_norm, post_norm;   // [H]
  std::vector<float> wq, wk, wv, wo;          // [out][in] row-major, as HF stores them
  std::vector<float> q_norm, k_norm;          // [head_dim]
  std::vector<float> w_gate, w_up, w_down;    // [I][H], [I][H], [H][I]
};

struct DFlashModel {
  std::string path;
  DFlashConfig config;
  std::vector<float> fc;           // [H][n * H_target]
  std::vector<float> hidden_norm;  // [H]
  std::vector<float> norm;         // [H]
  std::vector<DFlashLayer> layers;
};

// Loads dir/config.json and dir/model.safetensors (tensor names with or without a "model."
// prefix; F32, F16 or BF16) and checks them against each other and the target: H equal to
// the target's num_embd, target_layer_ids inside the trunk, mask_token_id inside the target's
// vocabulary. Throws std::runtime_error naming the file and what is wrong.
DFlashModel load_dflash_model(const std::string& dir, const ModelConfig& target);

}  // namespace deltaserve::runtime
