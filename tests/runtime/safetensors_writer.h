// Test-only safetensors writer: tensors kept as float values (written as F32, F16 or BF16),
// so tests can compute expected converted values from the originals. Header-only.
#pragma once

#include <bit>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/runtime/gguf_writer.h"

namespace deltaserve::testing {

struct HfTensor {
  std::string dtype = "BF16";  // "F32" or "BF16" (values must be exact in BF16)
  std::vector<int64_t> shape;  // HF order, outermost first
  std::vector<float> values;
};

inline Bytes encode_tensor(const HfTensor& t) {
  Bytes out;
  for (float v : t.values) {
    if (t.dtype == "F32") {
      put_pod(out, v);
    } else {
      put_pod(out, static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));  // BF16: exact values only
    }
  }
  return out;
}

// The file bytes for a raw header string and data section (for malformed-header tests).
inline Bytes safetensors_raw(const std::string& header, const Bytes& data) {
  Bytes out;
  put_pod<uint64_t>(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline Bytes safetensors_bytes(const std::map<std::string, HfTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  Bytes data;
  for (const auto& [name, t] : tensors) {
    const Bytes bytes = encode_tensor(t);
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned, as the library does
  return safetensors_raw(text, data);
}

}  // namespace deltaserve::testing
