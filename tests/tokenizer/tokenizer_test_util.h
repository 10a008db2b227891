// Shared by the tokenizer tests: the Qwen3 tokenizer fixture, loaded once per process.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"

namespace deltaserve::runtime::tokenizer_testing {

inline constexpr const char* kQwen3Dir = "tests/fixtures/qwen3_tokenizer";

inline const Tokenizer& qwen3_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::from_json_file(std::string(kQwen3Dir) + "/tokenizer.json");
  return *tokenizer;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

}  // namespace deltaserve::runtime::tokenizer_testing
