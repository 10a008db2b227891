// Test-only GGUF writer: builds a file in memory with every field under the test's control,
// so a test can write a valid file and then break exactly one thing. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "runtime/gguf_file.h"

namespace deltaserve::testing {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put_pod(Bytes& out, T value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

inline void put_string(Bytes& out, const std::string& s) {
  put_pod<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

class GgufWriter {
 public:
  struct KeyValue {
    std::string key;
    uint32_t type;
    Bytes payload;  // the encoded value after the type
  };
  struct Tensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<uint64_t> ne;
    Bytes data;
    std::optional<uint64_t> offset;  // relative to the data section; default: packed, aligned
  };
  // Offsets of the sections in the last build(), for truncation tests.
  struct Layout {
    size_t header_end = 0, metadata_end = 0, infos_end = 0, data_start = 0;
  };

  std::string magic = "GGUF";
  uint32_t version = 3;
  size_t alignment = 32;  // padding used by build(); add general.alignment to declare another
  std::optional<uint64_t> num_kv_override, num_tensors_override;
  std::vector<KeyValue> kvs;
  std::vector<Tensor> tensors;

  void add_raw(const std::string& key, runtime::GgufType type, Bytes payload) {
    kvs.push_back({key, static_cast<uint32_t>(type), std::move(payload)});
  }
  template <typename T>
  void add_scalar(const std::string& key, runtime::GgufType type, T value) {
    Bytes b;
    put_pod(b, value);
    add_raw(key, type, std::move(b));
  }
  void add_u32(const std::string& key, uint32_t v) { add_scalar(key, runtime::GgufType::Uint32, v); }
  void add_i32(const std::string& key, int32_t v) { add_scalar(key, runtime::GgufType::Int32, v); }
  void add_u64(const std::string& key, uint64_t v) { add_scalar(key, runtime::GgufType::Uint64, v); }
  void add_f32(const std::string& key, float v) { add_scalar(key, runtime::GgufType::Float32, v); }
  void add_bool(const std::string& key, bool v) { add_scalar<uint8_t>(key, runtime::GgufType::Bool, v); }
  void add_string(const std::string& key, const std::string& v) {
    Bytes b;
    put_string(b, v);
    add_raw(key, runtime::GgufType::String, std::move(b));
  }
  void add_string_array(const std::string& key, const std::vector<std::string>& v) {
    Bytes b;
    put_pod<uint32_t>(b, static_cast<uint32_t>(runtime::GgufType::String));
    put_pod<uint64_t>(b, v.size());
    for (const auto& s : v) put_string(b, s);
    add_raw(key, runtime::GgufType::Array, std::move(b));
  }
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    Bytes b;
    put_pod<uint32_t>(b, static_cast<uint32_t>(runtime::GgufType::Int32));
    put_pod<uint64_t>(b, v.size());
    for (int32_t x : v) put_pod(b, x);
    add_raw(key, runtime::GgufType::Array, std::move(b));
  }

  void remove_key(const std::string& key) {
    std::erase_if(kvs, [&](const KeyValue& kv) { return kv.key == key; });
  }
  KeyValue* find_key(const std::string& key) {
    for (auto& kv : kvs) if (kv.key == key) return &kv;
    return nullptr;
  }
  void set_u32(const std::string& key, uint32_t v) {
    remove_key(key);
    add_u32(key, v);
  }
  void set_string(const std::string& key, const std::string& v) {
    remove_key(key);
    add_string(key, v);
  }

  void add_tensor(const std::string& name, uint32_t ggml_type, std::vector<uint64_t> ne, Bytes data) {
    tensors.push_back({name, ggml_type, std::move(ne), std::move(data), std::nullopt});
  }
  Tensor* find_tensor(const std::string& name) {
    for (auto& t : tensors) if (t.name == name) return &t;
    return nullptr;
  }
  void remove_tensor(const std::string& name) {
    std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; });
  }

  Bytes build(Layout* layout = nullptr) const {
    Bytes out(magic.begin(), magic.end());
    put_pod<uint32_t>(out, version);
    put_pod<uint64_t>(out, num_tensors_override.value_or(tensors.size()));
    put_pod<uint64_t>(out, num_kv_override.value_or(kvs.size()));
    Layout l;
    l.header_end = out.size();
    for (const KeyValue& kv : kvs) {
      put_string(out, kv.key);
      put_pod<uint32_t>(out, kv.type);
      out.insert(out.end(), kv.payload.begin(), kv.payload.end());
    }
    l.metadata_end = out.size();
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = std::max(next, align(offset + t.data.size()));
      put_string(out, t.name);
      put_pod<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) put_pod<uint64_t>(out, n);
      put_pod<uint32_t>(out, t.ggml_type);
      put_pod<uint64_t>(out, offset);
    }
    l.infos_end = out.size();
    l.data_start = align(out.size());
    out.resize(l.data_start, 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t begin = l.data_start + offsets[i];
      if (out.size() < begin + tensors[i].data.size()) out.resize(begin + tensors[i].data.size(), 0);
      std::memcpy(out.data() + begin, tensors[i].data.data(), tensors[i].data.size());
    }
    if (layout != nullptr) *layout = l;
    return out;
  }

 private:
  uint64_t align(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }
};

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("deltaserve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Removes the old file first: on ext4, truncating a file with data in place forces a flush
// (auto_da_alloc), which makes loops that rewrite one file hundreds of times slow.
inline void write_file(const std::string& path, const Bytes& bytes) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace deltaserve::testing
