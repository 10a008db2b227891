// A ModelConfig as the GGUF metadata keys config_from_gguf reads (general.* and the
// architecture's hyperparameters), so a file written with them loads back to the same config.
#pragma once

#include "runtime/gguf_writer.h"
#include "runtime/model_config.h"

namespace deltaserve::runtime {

// "qwen35" (dense) or "qwen35moe".
const char* gguf_architecture_name(const ModelConfig& c);

// general.architecture, general.name and every hyperparameter key of c. The vocabulary size
// is written as <arch>.vocab_size too, so a file whose tokenizer lists fewer tokens keeps it.
GgufMetadata gguf_hparams(const ModelConfig& c);

}  // namespace deltaserve::runtime
