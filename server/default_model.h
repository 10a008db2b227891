// Where `deltaserve serve` finds its embedded default model when no --model is given.
#pragma once

#include <string>

namespace deltaserve::server {

// The file name of the embedded model (models/ in the source tree, share/deltaserve/models
// when installed).
inline constexpr const char* kDefaultModelFile = "deltaserve-tiny-moe.gguf";

// Searches, in order: ./models/, the folders above the running
// binary (a build tree inside the source tree), the install prefix's share/deltaserve/models,
// and the source tree this binary was built from. Returns "" when none exists.
std::string find_default_model();

}  // namespace deltaserve::server
