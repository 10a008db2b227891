// Reads an oracle fixture written by tools/oracle (tests/fixtures/<name>/): reference.json
// plus raw little-endian float32 arrays of reference logits and hidden states.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deltaserve::testing {

inline std::filesystem::path fixture_dir(const std::string& name) { return std::filesystem::path("tests/fixtures") / name; }

inline nlohmann::json read_reference(const std::string& name) {
  std::ifstream in(fixture_dir(name) / "reference.json");
  if (!in) throw std::runtime_error("missing fixture " + name + "/reference.json");
  return nlohmann::json::parse(in);
}

inline bool fixture_file_exists(const std::string& name, const std::string& file) {
  return std::filesystem::exists(fixture_dir(name) / file);
}

inline std::vector<float> read_f32(const std::string& name, const std::string& file) {
  const std::filesystem::path path = fixture_dir(name) / file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture file " + path.string());
  in.seekg(0, std::ios::end);
  const auto bytes = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<float> data(bytes / sizeof(float));
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  return data;
}

// max|a - b| / max|b| over n values.
inline double relative_max_diff(const float* a, const float* b, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

inline int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace deltaserve::testing
