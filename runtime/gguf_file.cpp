#include "runtime/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>

namespace deltaserve::runtime {

static_assert(std::endian::native == std::endian::little, "GGUF is read in place: little-endian hosts only");

namespace {

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// Smallest encodings, used to reject absurd counts before anything is allocated:
// a key/value pair is a string length (8), a type (4) and at least one value byte;
// a tensor info is a name length (8), n_dims (4), one ne (8), a type (4), an offset (8).
constexpr size_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

}  // namespace

// Bounds-checked little-endian reader over the mapping. Every read checks the bytes left
// first, so no corrupt length can make the parser read or allocate past the end.
class GgufReader {
 public:
  GgufReader(const std::string& path, const std::byte* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    std::string where = "offset " + std::to_string(offset);
    if (!context_.empty()) where = context_ + " at " + where;
    throw GgufError(path_ + ": " + where + ": " + what);
  }

  void need(uint64_t num_bytes, std::string_view what) const {
    if (num_bytes > remaining()) {
      fail("truncated " + std::string(what) + " (needs " + std::to_string(num_bytes) +
           " bytes, " + std::to_string(remaining()) + " left)");
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    const uint64_t length = read<uint64_t>(what);
    need(length, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
    pos_ += static_cast<size_t>(length);
    return s;
  }

 private:
  const std::string& path_;
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string context_;
};

namespace {

using Reader = GgufReader;

bool is_known_type(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::Float64); }

// Bytes of one scalar element; 0 for String and Array.
size_t scalar_bytes(GgufType type) {
  switch (type) {
    case GgufType::Uint8: case GgufType::Int8: case GgufType::Bool: return 1;
    case GgufType::Uint16: case GgufType::Int16: return 2;
    case GgufType::Uint32: case GgufType::Int32: case GgufType::Float32: return 4;
    case GgufType::Uint64: case GgufType::Int64: case GgufType::Float64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

bool is_unsigned(GgufType t) {
  return t == GgufType::Uint8 || t == GgufType::Uint16 || t == GgufType::Uint32 ||
         t == GgufType::Uint64;
}
bool is_signed(GgufType t) {
  return t == GgufType::Int8 || t == GgufType::Int16 || t == GgufType::Int32 ||
         t == GgufType::Int64;
}
bool is_float(GgufType t) { return t == GgufType::Float32 || t == GgufType::Float64; }

uint64_t read_unsigned(Reader& r, GgufType t) {
  switch (t) {
    case GgufType::Uint8: return r.read<uint8_t>("uint8 value");
    case GgufType::Uint16: return r.read<uint16_t>("uint16 value");
    case GgufType::Uint32: return r.read<uint32_t>("uint32 value");
    default: return r.read<uint64_t>("uint64 value");
  }
}
int64_t read_signed(Reader& r, GgufType t) {
  switch (t) {
    case GgufType::Int8: return r.read<int8_t>("int8 value");
    case GgufType::Int16: return r.read<int16_t>("int16 value");
    case GgufType::Int32: return r.read<int32_t>("int32 value");
    default: return r.read<int64_t>("int64 value");
  }
}
double read_float(Reader& r, GgufType t) {
  if (t == GgufType::Float32) return r.read<float>("float32 value");
  return r.read<double>("float64 value");
}
bool read_bool(Reader& r) {
  const size_t at = r.offset();
  const uint8_t b = r.read<uint8_t>("bool value");
  if (b > 1) r.fail_at(at, "bool value " + std::to_string(b) + " is neither 0 nor 1");
  return b == 1;
}

template <typename T, typename ReadOne>
std::vector<T> read_elements(uint64_t count, ReadOne read_one) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(count));  // count was checked against the bytes left
  for (uint64_t i = 0; i < count; ++i) out.push_back(read_one());
  return out;
}

GgufValue read_array(Reader& r) {
  const size_t at = r.offset();
  const uint32_t elem_id = r.read<uint32_t>("array element type");
  if (elem_id == static_cast<uint32_t>(GgufType::Array)) {
    r.fail_at(at, "arrays of arrays are not supported");
  }
  if (!is_known_type(elem_id)) {
    r.fail_at(at, "unknown array element type " + std::to_string(elem_id));
  }
  const auto elem = static_cast<GgufType>(elem_id);
  const uint64_t count = r.read<uint64_t>("array length");
  const size_t min_bytes = elem == GgufType::String ? 8 : scalar_bytes(elem);
  if (count > r.remaining() / min_bytes) {
    r.fail("array length " + std::to_string(count) + " of " + gguf_type_name(elem) +
           " cannot fit in the " + std::to_string(r.remaining()) + " bytes left");
  }
  GgufValue v;
  v.type = GgufType::Array;
  v.array_type = elem;
  if (is_unsigned(elem)) {
    v.value = read_elements<uint64_t>(count, [&] { return read_unsigned(r, elem); });
  } else if (is_signed(elem)) {
    v.value = read_elements<int64_t>(count, [&] { return read_signed(r, elem); });
  } else if (is_float(elem)) {
    v.value = read_elements<double>(count, [&] { return read_float(r, elem); });
  } else if (elem == GgufType::Bool) {
    v.value = read_elements<bool>(count, [&] { return read_bool(r); });
  } else {
    v.value = read_elements<std::string>(count, [&] { return r.read_string("string"); });
  }
  return v;
}

GgufValue read_value(Reader& r, uint32_t type_id, size_t type_offset) {
  if (!is_known_type(type_id)) {
    r.fail_at(type_offset, "unknown metadata value type " + std::to_string(type_id));
  }
  const auto type = static_cast<GgufType>(type_id);
  if (type == GgufType::Array) return read_array(r);
  GgufValue v;
  v.type = type;
  if (is_unsigned(type)) v.value = read_unsigned(r, type);
  else if (is_signed(type)) v.value = read_signed(r, type);
  else if (is_float(type)) v.value = read_float(r, type);
  else if (type == GgufType::Bool) v.value = read_bool(r);
  else v.value = r.read_string("string");
  return v;
}

std::string shape_string(const std::array<int64_t, 4>& ne, int num_dims) {
  std::string s = "{";
  for (int i = 0; i < num_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

}  // namespace

std::string gguf_type_name(GgufType type) {
  static constexpr const char* kNames[] = {"uint8",  "int8",  "uint16", "int16", "uint32",
                                           "int32",  "float32", "bool", "string", "array",
                                           "uint64", "int64", "float64"};
  const auto id = static_cast<uint32_t>(type);
  if (id < std::size(kNames)) return kNames[id];
  return "type " + std::to_string(id);
}

GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  try {
    file->mapping_ = std::make_unique<MappedFile>(path);
  } catch (const std::runtime_error& e) {
    throw GgufError(e.what());
  }
  file->map_ = file->mapping_->data();
  file->map_bytes_ = file->mapping_->num_bytes();
  file->parse();
  return file;
}

void GgufFile::parse() {
  Reader r(path_, map_, map_bytes_);
  r.need(4, "header");
  if (std::memcmp(map_, "GGUF", 4) != 0) {
    std::string magic;
    for (int i = 0; i < 4; ++i) {
      const auto c = static_cast<unsigned char>(map_[i]);
      magic += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    r.fail("bad magic '" + magic + "' (not a GGUF file)");
  }
  r.read<uint32_t>("header");
  const size_t version_offset = r.offset();
  version_ = r.read<uint32_t>("header");
  if (version_ != 2 && version_ != 3) {
    std::string hint = version_ == 1 ? " (GGUF v1 predates 64-bit counts)" : "";
    if (version_ > 0xffff) hint = " (a big-endian file?)";
    r.fail_at(version_offset, "unsupported version " + std::to_string(version_) +
                                  " (only 2 and 3)" + hint);
  }
  const uint64_t num_tensors = r.read<uint64_t>("header");
  const uint64_t num_kv = r.read<uint64_t>("header");
  if (num_kv > r.remaining() / kMinKeyValueBytes) {
    r.fail("metadata count " + std::to_string(num_kv) + " cannot fit in the " +
           std::to_string(r.remaining()) + " bytes left");
  }
  parse_metadata(r, num_kv);
  parse_alignment();
  parse_tensor_infos(r, num_tensors);
  place_tensors();
}

void GgufFile::parse_metadata(GgufReader& r, uint64_t num_kv) {
  for (uint64_t i = 0; i < num_kv; ++i) {
    r.set_context("");
    const size_t key_offset = r.offset();
    std::string key = r.read_string("metadata key");
    if (key.empty()) r.fail_at(key_offset, "empty metadata key");
    r.set_context("key '" + key + "'");
    if (metadata_.count(key) != 0) r.fail_at(key_offset, "duplicate metadata key");
    const size_t type_offset = r.offset();
    const uint32_t type_id = r.read<uint32_t>("metadata value type");
    metadata_.emplace(std::move(key), read_value(r, type_id, type_offset));
  }
  r.set_context("");
}

void GgufFile::parse_alignment() {
  const GgufValue* v = find("general.alignment");
  if (v == nullptr) return;
  const std::string where = path_ + ": key 'general.alignment': ";
  if (!is_unsigned(v->type) && !is_signed(v->type)) {
    throw GgufError(where + "expected an integer, found " + gguf_type_name(v->type));
  }
  const uint64_t a = get_uint("general.alignment");
  if (a == 0 || (a & (a - 1)) != 0) {
    throw GgufError(where + "alignment must be a nonzero power of two, got " + std::to_string(a));
  }
  alignment_ = static_cast<size_t>(a);
}

void GgufFile::parse_tensor_infos(GgufReader& r, uint64_t num_tensors) {
  if (num_tensors > r.remaining() / kMinTensorInfoBytes) {
    r.fail("tensor count " + std::to_string(num_tensors) + " cannot fit in the " +
           std::to_string(r.remaining()) + " bytes left");
  }
  tensors_.reserve(static_cast<size_t>(num_tensors));
  offsets_.reserve(static_cast<size_t>(num_tensors));
  for (uint64_t i = 0; i < num_tensors; ++i) {
    r.set_context("tensor #" + std::to_string(i));
    const size_t info_offset = r.offset();
    TensorView t;
    t.name = r.read_string("tensor name");
    if (t.name.empty()) r.fail_at(info_offset, "empty tensor name");
    r.set_context("tensor '" + t.name + "'");
    if (tensor_index_.count(t.name) != 0) r.fail_at(info_offset, "duplicate tensor name");
    const size_t dims_offset = r.offset();
    const uint32_t num_dims = r.read<uint32_t>("n_dims");
    if (num_dims == 0 || num_dims > kMaxDims) {
      r.fail_at(dims_offset, "n_dims " + std::to_string(num_dims) + " is outside 1..4");
    }
    t.num_dims = static_cast<int>(num_dims);
    for (uint32_t d = 0; d < num_dims; ++d) {
      const uint64_t n = r.read<uint64_t>("ne");
      if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        r.fail_at(dims_offset, "ne[" + std::to_string(d) + "] = " + std::to_string(n) +
                                   " is out of range (must be > 0)");
      }
      t.ne[d] = static_cast<int64_t>(n);
    }
    const size_t type_offset = r.offset();
    const uint32_t type_id = r.read<uint32_t>("ggml type");
    const std::optional<kernels::DType> type = kernels::dtype_from_ggml_id(type_id);
    if (!type) r.fail_at(type_offset, "unknown or unsupported ggml type " + std::to_string(type_id));
    t.type = *type;
    offsets_.push_back(r.read<uint64_t>("data offset"));
    t.num_bytes = tensor_bytes(r, t, info_offset);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  r.set_context("");
  // The data section starts at the next multiple of the alignment (it may be absent when
  // the file holds no tensors).
  const size_t pad = (alignment_ - r.offset() % alignment_) % alignment_;
  if (pad > std::numeric_limits<size_t>::max() - r.offset()) r.fail("data section offset overflows");
  data_offset_ = r.offset() + pad;
}

size_t GgufFile::tensor_bytes(const GgufReader& r, const TensorView& t, size_t info_offset) const {
  const kernels::DTypeTraits& traits = kernels::dtype_traits(t.type);
  const std::string shape = shape_string(t.ne, t.num_dims);
  if (t.ne[0] % traits.block_elements != 0) {
    r.fail_at(info_offset, "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                               std::string(traits.name) + " block size " +
                               std::to_string(traits.block_elements));
  }
  int64_t num_elements = 1;
  for (int64_t n : t.ne) {
    if (__builtin_mul_overflow(num_elements, n, &num_elements)) {
      r.fail_at(info_offset, "shape " + shape + " has too many elements");
    }
  }
  const auto num_blocks = static_cast<uint64_t>(num_elements / traits.block_elements);
  uint64_t num_bytes = 0;
  if (__builtin_mul_overflow(num_blocks, traits.block_bytes, &num_bytes) ||
      num_bytes > std::numeric_limits<size_t>::max() / 2) {
    r.fail_at(info_offset, "shape " + shape + " of " + std::string(traits.name) + " has too many bytes");
  }
  return static_cast<size_t>(num_bytes);
}

void GgufFile::place_tensors() {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorView& t = tensors_[i];
    const uint64_t offset = offsets_[i];
    const std::string where = path_ + ": tensor '" + t.name + "': ";
    if (offset % alignment_ != 0) {
      throw GgufError(where + "data offset " + std::to_string(offset) +
                      " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(static_cast<uint64_t>(data_offset_), offset, &begin) ||
        __builtin_add_overflow(begin, static_cast<uint64_t>(t.num_bytes), &end) ||
        end > map_bytes_) {
      throw GgufError(where + "data [" + std::to_string(data_offset_) + " + " +
                      std::to_string(offset) + ", +" + std::to_string(t.num_bytes) +
                      " bytes) lies outside the file (" + std::to_string(map_bytes_) + " bytes)");
    }
    t.data = map_ + begin;
  }
  // No two tensors may share a byte: sort by offset and compare neighbours.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets_[a] < offsets_[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t prev = order[k - 1], cur = order[k];
    if (offsets_[prev] + tensors_[prev].num_bytes > offsets_[cur]) {
      throw GgufError(path_ + ": tensor '" + tensors_[cur].name + "': data at offset " +
                      std::to_string(offsets_[cur]) + " overlaps tensor '" + tensors_[prev].name +
                      "'");
    }
  }
  offsets_.clear();
  offsets_.shrink_to_fit();
}

}  // namespace deltaserve::runtime
