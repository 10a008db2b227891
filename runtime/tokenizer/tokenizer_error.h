// Load-time tokenizer errors (malformed tokenizer.json or GGUF vocabulary). Encoding and
// decoding never throw.
#pragma once

#include <stdexcept>

namespace deltaserve::runtime {

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace deltaserve::runtime
