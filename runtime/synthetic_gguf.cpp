#include "runtime/synthetic_gguf.h"

#include <stdexcept>
#include <vector>

#include "runtime/gguf_hparams.h"

namespace deltaserve::runtime {

namespace {

constexpr int64_t kNormalTokenType = 1;  // llama.cpp's LLAMA_TOKEN_TYPE_NORMAL

}  // namespace

GgufMetadata padded_tokenizer_metadata(const GgufFile& source, int64_t num_vocab) {
  std::vector<std::string> tokens = source.get_string_array("tokenizer.ggml.tokens");
  const int64_t listed = static_cast<int64_t>(tokens.size());
  if (listed > num_vocab) {
    throw std::runtime_error(source.path() + ": its tokenizer lists " + std::to_string(listed) +
                             " tokens, more than the model's vocabulary of " + std::to_string(num_vocab));
  }
  std::vector<int64_t> types;
  if (source.find("tokenizer.ggml.token_type") != nullptr) types = source.get_int_array("tokenizer.ggml.token_type");
  else types.assign(tokens.size(), kNormalTokenType);
  for (int64_t id = listed; id < num_vocab; ++id) {
    tokens.push_back("[synthetic-" + std::to_string(id) + "]");
    types.push_back(kNormalTokenType);
  }
  GgufMetadata m;
  for (const auto& [key, value] : source.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    if (key == "tokenizer.ggml.tokens") m.emplace_back(key, gguf_string_array(tokens));
    else if (key == "tokenizer.ggml.token_type") m.emplace_back(key, gguf_int32_array(types));
    else m.emplace_back(key, value);
  }
  if (source.find("tokenizer.ggml.token_type") == nullptr) m.emplace_back("tokenizer.ggml.token_type", gguf_int32_array(types));
  return m;
}

void write_synthetic_gguf(const LoadedModel& model, const GgufFile& tokenizer_source, const std::string& path) {
  GgufMetadata metadata = gguf_hparams(model.config);
  for (auto& kv : padded_tokenizer_metadata(tokenizer_source, model.config.num_vocab)) metadata.push_back(std::move(kv));
  std::vector<TensorView> tensors;
  tensors.reserve(model.tensors.size());
  for (const auto& [name, view] : model.tensors) tensors.push_back(view);
  write_gguf(path, metadata, tensors);
}

}  // namespace deltaserve::runtime
