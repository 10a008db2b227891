#include "runtime/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <variant>

namespace deltaserve::runtime {

static_assert(std::endian::native == std::endian::little, "GGUF is written in place: little-endian hosts only");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF"
constexpr uint32_t kGgufVersion = 3;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Appends to the file, counting bytes so the data section's padding can be placed.
class GgufOut {
 public:
  explicit GgufOut(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "wb")) {
    if (!file_) throw std::runtime_error(path + ": cannot open for writing: " + std::strerror(errno));
  }

  size_t offset() const { return offset_; }

  void bytes(const void* data, size_t n) {
    if (n != 0 && std::fwrite(data, 1, n, file_.get()) != n)
      throw std::runtime_error(path_ + ": write failed at offset " + std::to_string(offset_) + ": " + std::strerror(errno));
    offset_ += n;
  }
  template <typename T>
  void put(T value) {
    bytes(&value, sizeof(T));
  }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(size_t alignment) {
    static const char zeros[256] = {};
    while (offset_ % alignment != 0) bytes(zeros, std::min(alignment - offset_ % alignment, sizeof(zeros)));
  }
  void close() {
    if (std::fclose(file_.release()) != 0) throw std::runtime_error(path_ + ": close failed: " + std::strerror(errno));
  }

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  size_t offset_ = 0;
};

// One scalar of type t from the widened value the reader's variant holds.
template <typename Wide>
void put_scalar(GgufOut& out, GgufType t, Wide v) {
  switch (t) {
    case GgufType::Uint8: out.put<uint8_t>(static_cast<uint8_t>(v)); return;
    case GgufType::Int8: out.put<int8_t>(static_cast<int8_t>(v)); return;
    case GgufType::Uint16: out.put<uint16_t>(static_cast<uint16_t>(v)); return;
    case GgufType::Int16: out.put<int16_t>(static_cast<int16_t>(v)); return;
    case GgufType::Uint32: out.put<uint32_t>(static_cast<uint32_t>(v)); return;
    case GgufType::Int32: out.put<int32_t>(static_cast<int32_t>(v)); return;
    case GgufType::Uint64: out.put<uint64_t>(static_cast<uint64_t>(v)); return;
    case GgufType::Int64: out.put<int64_t>(static_cast<int64_t>(v)); return;
    case GgufType::Float32: out.put<float>(static_cast<float>(v)); return;
    case GgufType::Float64: out.put<double>(static_cast<double>(v)); return;
    case GgufType::Bool: out.put<uint8_t>(v ? 1 : 0); return;
    default: throw std::invalid_argument("GGUF writer: a " + gguf_type_name(t) + " is not a scalar");
  }
}

template <typename Wide>
void put_array(GgufOut& out, GgufType elem, const std::vector<Wide>& values) {
  out.put<uint32_t>(static_cast<uint32_t>(elem));
  out.put<uint64_t>(values.size());
  for (const Wide& v : values) {
    if constexpr (std::is_same_v<Wide, std::string>) out.string(v);
    else put_scalar(out, elem, v);
  }
}

void put_value(GgufOut& out, const std::string& key, const GgufValue& v) {
  out.string(key);
  out.put<uint32_t>(static_cast<uint32_t>(v.type));
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (v.type != GgufType::String) throw std::invalid_argument("GGUF writer: key '" + key + "' holds a string");
          out.string(x);
        } else if constexpr (std::is_arithmetic_v<T>) {
          put_scalar(out, v.type, x);
        } else {
          if (v.type != GgufType::Array) throw std::invalid_argument("GGUF writer: key '" + key + "' holds an array");
          put_array(out, v.array_type, x);
        }
      },
      v.value);
}

// A tensor's bytes in row order, contiguous (strided slices written one after another).
void put_tensor_bytes(GgufOut& out, const TensorView& t) {
  if (t.is_contiguous()) {
    out.bytes(t.data, static_cast<size_t>(t.num_rows()) * t.row_bytes());
    return;
  }
  for (int64_t r = 0; r < t.num_rows(); ++r) out.bytes(t.row(r), t.row_bytes());
}

size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

GgufValue gguf_uint32(uint32_t v) { return GgufValue{GgufType::Uint32, GgufType::Uint32, uint64_t{v}}; }
GgufValue gguf_float32(float v) { return GgufValue{GgufType::Float32, GgufType::Uint32, double{v}}; }
GgufValue gguf_bool(bool v) { return GgufValue{GgufType::Bool, GgufType::Uint32, v}; }
GgufValue gguf_string(std::string v) { return GgufValue{GgufType::String, GgufType::Uint32, std::move(v)}; }
GgufValue gguf_string_array(std::vector<std::string> v) {
  return GgufValue{GgufType::Array, GgufType::String, std::move(v)};
}
GgufValue gguf_int32_array(const std::vector<int64_t>& v) { return GgufValue{GgufType::Array, GgufType::Int32, v}; }

void write_gguf(const std::string& path, const GgufMetadata& metadata, const std::vector<TensorView>& tensors,
                size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("GGUF writer: alignment " + std::to_string(alignment) + " is not a power of two");
  const bool has_alignment = std::any_of(metadata.begin(), metadata.end(),
                                         [](const auto& kv) { return kv.first == "general.alignment"; });
  GgufOut out(path);
  out.put<uint32_t>(kGgufMagic);
  out.put<uint32_t>(kGgufVersion);
  out.put<uint64_t>(tensors.size());
  out.put<uint64_t>(metadata.size() + (has_alignment ? 0 : 1));
  if (!has_alignment) put_value(out, "general.alignment", gguf_uint32(static_cast<uint32_t>(alignment)));
  for (const auto& [key, value] : metadata) put_value(out, key, value);

  size_t data_offset = 0;  // relative to the data section
  for (const TensorView& t : tensors) {
    out.string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.num_dims));
    for (int d = 0; d < t.num_dims; ++d) out.put<uint64_t>(static_cast<uint64_t>(t.ne[static_cast<size_t>(d)]));
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(data_offset);
    data_offset = align_up(data_offset + static_cast<size_t>(t.num_rows()) * t.row_bytes(), alignment);
  }
  out.pad_to(alignment);
  const size_t data_start = out.offset();
  for (const TensorView& t : tensors) {
    put_tensor_bytes(out, t);
    if ((out.offset() - data_start) % alignment != 0) out.pad_to(alignment);
  }
  out.close();
}

}  // namespace deltaserve::runtime
