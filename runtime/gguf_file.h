// GGUF reader: maps a file read-only and validates all of it up front (header, metadata,
// tensor infos, alignment, bounds, overlaps), so nothing later can read outside the mapping.
// Immutable after open(); safe to share across threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "runtime/mapped_file.h"
#include "runtime/tensor_view.h"

namespace deltaserve::runtime {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  Uint8 = 0, Int8 = 1, Uint16 = 2, Int16 = 3, Uint32 = 4, Int32 = 5, Float32 = 6,
  Bool = 7, String = 8, Array = 9, Uint64 = 10, Int64 = 11, Float64 = 12,
};

// One metadata value. Integers of every width are held widened; arrays keep their element
// type. Strings are copied out of the mapping.
struct GgufValue {
  GgufType type = GgufType::Uint32;
  GgufType array_type = GgufType::Uint32;  // element type when type == Array
  std::variant<int64_t, uint64_t, double, bool, std::string,
               std::vector<int64_t>, std::vector<uint64_t>, std::vector<double>,
               std::vector<bool>, std::vector<std::string>>
      value;
};

// "uint32", "string", "array", ... ("type N" for a number outside the specification).
std::string gguf_type_name(GgufType type);

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GgufReader;  // gguf_file.cpp

class GgufFile {
 public:
  // Throws GgufError with one line naming the file, the offset or key, and what is wrong.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in file order
  size_t data_offset() const { return data_offset_; }  // start of the (aligned) data section
  size_t file_bytes() const { return map_bytes_; }

  const GgufValue* find(const std::string& key) const;
  const TensorView* find_tensor(const std::string& name) const;

  // Typed getters: throw GgufError naming the key when it is missing or of another type.
  // Integer getters accept any integer type whose value fits.
  uint64_t get_uint(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;  // any integer array
  std::vector<double> get_float_array(const std::string& key) const;

 private:
  GgufFile() = default;
  void parse();
  void parse_metadata(GgufReader& r, uint64_t num_kv);
  void parse_alignment();
  void parse_tensor_infos(GgufReader& r, uint64_t num_tensors);
  size_t tensor_bytes(const GgufReader& r, const TensorView& t, size_t info_offset) const;
  void place_tensors();
  [[noreturn]] void fail_key(const std::string& key, const std::string& what) const;

  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::unique_ptr<MappedFile> mapping_;
  const std::byte* map_ = nullptr;  // mapping_'s bytes
  size_t map_bytes_ = 0;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> tensor_index_;
  std::vector<uint64_t> offsets_;  // data offsets of tensors_, only while parsing
};

}  // namespace deltaserve::runtime
