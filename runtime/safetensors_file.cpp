#include "runtime/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/mapped_file.h"

namespace deltaserve::runtime {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the safetensors library's own limit
constexpr size_t kMaxDims = 4;

struct Entry {
  TensorView view;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, uint64_t data_bytes) : path_(path), data_bytes_(data_bytes) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw std::runtime_error(path_ + ": " + where + ": " + what);
  }

  // Parses the JSON, rejecting duplicate names (which nlohmann would silently merge).
  json parse_json(std::string_view text) const {
    std::set<std::string> names;
    std::string duplicate;
    const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& value) {
      if (event == json::parse_event_t::key && depth == 1) {
        const std::string& name = value.get_ref<const std::string&>();
        if (!names.insert(name).second && duplicate.empty()) duplicate = name;
      }
      return true;
    };
    json header;
    try {
      header = json::parse(text.begin(), text.end(), on_event);
    } catch (const json::exception& e) {
      fail("header", std::string("invalid JSON: ") + e.what());
    }
    if (!duplicate.empty()) fail("tensor '" + duplicate + "'", "duplicate name in the header");
    if (!header.is_object()) fail("header", "not a JSON object");
    return header;
  }

  Entry parse_entry(const std::string& name, const json& info) const {
    const std::string where = "tensor '" + name + "'";
    if (name.empty()) fail("header", "empty tensor name");
    if (!info.is_object() || info.size() != 3 || !info.contains("dtype") ||
        !info.contains("shape") || !info.contains("data_offsets")) {
      fail(where, "entry must be an object with exactly dtype, shape and data_offsets");
    }
    Entry e;
    e.view.name = name;
    e.view.type = parse_dtype(where, info["dtype"]);
    parse_shape(where, info["shape"], e.view);
    const json& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      fail(where, "data_offsets must be two unsigned integers");
    }
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes_) {
      fail(where, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") lie outside the data section (" + std::to_string(data_bytes_) + " bytes)");
    }
    if (e.end - e.begin != e.view.num_bytes) {
      fail(where, "data_offsets span " + std::to_string(e.end - e.begin) + " bytes but the shape needs " +
                      std::to_string(e.view.num_bytes));
    }
    return e;
  }

 private:
  kernels::DType parse_dtype(const std::string& where, const json& dtype) const {
    if (!dtype.is_string()) fail(where, "dtype must be a string");
    const std::string& s = dtype.get_ref<const std::string&>();
    if (s == "F32") return kernels::DType::F32;
    if (s == "F16") return kernels::DType::F16;
    if (s == "BF16") return kernels::DType::BF16;
    fail(where, "unsupported dtype '" + s + "' (expected F32, F16 or BF16)");
  }

  void parse_shape(const std::string& where, const json& shape, TensorView& view) const {
    if (!shape.is_array() || shape.size() > kMaxDims) {
      fail(where, "shape must be an array of at most 4 dimensions");
    }
    view.num_dims = std::max<int>(1, static_cast<int>(shape.size()));
    uint64_t num_elements = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (!shape[i].is_number_unsigned()) fail(where, "shape entries must be unsigned integers");
      const uint64_t d = shape[i].get<uint64_t>();
      if (d == 0 || d > data_bytes_ || __builtin_mul_overflow(num_elements, d, &num_elements) ||
          num_elements > data_bytes_) {
        fail(where, "shape dimension " + std::to_string(d) + " is zero or larger than the file");
      }
      view.ne[shape.size() - 1 - i] = static_cast<int64_t>(d);  // innermost first
    }
    view.num_bytes = static_cast<size_t>(num_elements) * kernels::dtype_traits(view.type).block_bytes;
  }

  const std::string& path_;
  uint64_t data_bytes_;
};

}  // namespace

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = std::make_unique<MappedFile>(path);
  file->map_ = file->mapping_->data();
  file->map_bytes_ = file->mapping_->num_bytes();
  file->parse();
  return file;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse() {
  if (map_bytes_ < 8) {
    throw std::runtime_error(path_ + ": offset 0: truncated header (" + std::to_string(map_bytes_) +
                             " bytes, needs 8)");
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, map_, 8);
  if (header_bytes > kMaxHeaderBytes || header_bytes > map_bytes_ - 8) {
    throw std::runtime_error(path_ + ": offset 0: header length " + std::to_string(header_bytes) +
                             " exceeds the file (" + std::to_string(map_bytes_) + " bytes) or 100 MiB");
  }
  const std::byte* data = map_ + 8 + header_bytes;
  const HeaderParser parser(path_, map_bytes_ - 8 - header_bytes);
  const json header =
      parser.parse_json({reinterpret_cast<const char*>(map_ + 8), static_cast<size_t>(header_bytes)});
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) parser.fail("header", "__metadata__ must be an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) parser.fail("__metadata__", "value of '" + key + "' is not a string");
        metadata_.emplace(key, value.get<std::string>());
      }
      continue;
    }
    entries.push_back(parser.parse_entry(name, info));
  }
  // No two tensors may share a byte.
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entries[a].begin < entries[b].begin; });
  for (size_t k = 1; k < order.size(); ++k) {
    const Entry& prev = entries[order[k - 1]];
    const Entry& cur = entries[order[k]];
    if (prev.end > cur.begin) {
      parser.fail("tensor '" + cur.view.name + "'", "data overlaps tensor '" + prev.view.name + "'");
    }
  }
  tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.view.data = data + e.begin;
    index_.emplace(e.view.name, tensors_.size());
    tensors_.push_back(std::move(e.view));
  }
}

}  // namespace deltaserve::runtime
