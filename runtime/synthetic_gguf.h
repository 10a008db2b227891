// A servable GGUF file of a synthetic model (synthetic_model.h): the preset's real shapes and
// `bench`'s weights, with the tokenizer and chat template of another GGUF (the embedded
// model's, usually). The daemon then serves exactly what `deltaserve bench` times, so served
// figures (deltaserve-load against `serve`) stand next to the bench's at the same shapes.
//
// The tokenizer's token list is padded to the preset's vocabulary with normal tokens
// "[synthetic-N]" (plain ASCII, so each one decodes to its own text and no merge produces
// it): random weights pick ids across the whole vocabulary, and every id must decode.
#pragma once

#include <string>

#include "runtime/gguf_file.h"
#include "runtime/gguf_writer.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

// Every tokenizer.* key of source (the chat template included), with tokens and token types
// padded to num_vocab. Throws std::runtime_error when source has no token list or more tokens
// than num_vocab.
GgufMetadata padded_tokenizer_metadata(const GgufFile& source, int64_t num_vocab);

// Writes model (its config's hyperparameters, every tensor) with tokenizer_source's tokenizer
// to path. Throws std::runtime_error naming the path or the mismatch.
void write_synthetic_gguf(const LoadedModel& model, const GgufFile& tokenizer_source, const std::string& path);

}  // namespace deltaserve::runtime
