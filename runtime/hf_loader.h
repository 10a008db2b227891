// The Hugging Face half of load_model(): a directory with config.json, model.safetensors (or
// shards listed in model.safetensors.index.json), tokenizer.json and tokenizer_config.json.
// Tensors are converted to the GGUF conventions exactly as llama.cpp's converter does
// (MODEL.md 5.4, 5.5), so the forward pass sees one layout whatever the source.
// Startup only; any thread.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

// Text fields are read from "text_config" when present, else from the top level. Sets
// num_mtp_layers from mtp_num_hidden_layers and tied_embeddings from tie_word_embeddings;
// the loader revises both from the tensors actually present. Does not call validate().
// Throws std::runtime_error "<source>: '<field>': <what is wrong>".
ModelConfig config_from_hf_json(const nlohmann::json& config_json, const std::string& source);

// Opens, validates, converts and binds an HF model directory.
std::unique_ptr<LoadedModel> load_hf_model(const std::string& dir);

}  // namespace deltaserve::runtime
