// One .safetensors file, mapped read-only and validated up front as strictly as a GGUF file:
// header length, JSON syntax, duplicate names, dtypes (F32, F16, BF16), shapes, offsets
// inside the data section, sizes matching shapes, no two tensors overlapping. Immutable
// after open(); safe to share across threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/mapped_file.h"
#include "runtime/tensor_view.h"

namespace deltaserve::runtime {

class SafetensorsFile {
 public:
  // Throws std::runtime_error: "<path>: <header offset or tensor>: <what is wrong>".
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // HF shape [d0, ..., dn-1] becomes ne = {dn-1, ..., d0} (innermost first, as in GGUF);
  // a 0-d tensor becomes ne = {1}. Sorted by name.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void parse();
  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  const std::byte* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace deltaserve::runtime
