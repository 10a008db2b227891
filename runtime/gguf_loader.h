// The GGUF half of load_model(): hyperparameters from llama.cpp's metadata keys
// (MODEL.md 5.2) and tensors bound by their GGUF names. Startup only; any thread.
#pragma once

#include <memory>
#include <string>

#include "runtime/gguf_file.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

// Reads and validates the config. tied_embeddings is set from the absence of
// output.weight. Throws GgufError / std::runtime_error, one line naming the file and key.
ModelConfig config_from_gguf(const GgufFile& file);

// Opens, validates and binds a GGUF model file.
std::unique_ptr<LoadedModel> load_gguf_model(const std::string& path);

}  // namespace deltaserve::runtime
