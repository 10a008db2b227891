// load_model(): the one entry point for model files (declared in model_weights.h).
#include <filesystem>
#include <stdexcept>

#include "runtime/gguf_loader.h"
#include "runtime/hf_loader.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

std::unique_ptr<LoadedModel> load_model(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot access: " + ec.message());
  if (std::filesystem::is_directory(status)) return load_hf_model(path);
  if (std::filesystem::is_regular_file(status)) return load_gguf_model(path);
  throw std::runtime_error(path + ": neither a GGUF file nor an HF model directory");
}

}  // namespace deltaserve::runtime
