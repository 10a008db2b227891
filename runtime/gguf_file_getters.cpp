// GgufFile's typed metadata getters (the parser is in gguf_file.cpp).
#include <limits>

#include "runtime/gguf_file.h"

namespace deltaserve::runtime {

namespace {

template <typename T>
const T* get_if(const GgufValue& v) {
  return std::get_if<T>(&v.value);
}

std::string describe(const GgufValue& v) {
  if (v.type == GgufType::Array) return "array of " + gguf_type_name(v.array_type);
  return gguf_type_name(v.type);
}

}  // namespace

void GgufFile::fail_key(const std::string& key, const std::string& what) const {
  throw GgufError(path_ + ": key '" + key + "': " + what);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const TensorView* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (v->type != GgufType::Array) {
    if (const auto* u = get_if<uint64_t>(*v)) return *u;
    if (const auto* i = get_if<int64_t>(*v)) {
      if (*i < 0) fail_key(key, "negative value " + std::to_string(*i) + " where unsigned expected");
      return static_cast<uint64_t>(*i);
    }
  }
  fail_key(key, "expected an integer, found " + describe(*v));
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (v->type != GgufType::Array) {
    if (const auto* i = get_if<int64_t>(*v)) return *i;
    if (const auto* u = get_if<uint64_t>(*v)) {
      if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_key(key, "value " + std::to_string(*u) + " does not fit in int64");
      }
      return static_cast<int64_t>(*u);
    }
  }
  fail_key(key, "expected an integer, found " + describe(*v));
}

// Floats accept integer values too: a writer may store a whole-number float as an integer.
double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (v->type != GgufType::Array) {
    if (const auto* d = get_if<double>(*v)) return *d;
    if (const auto* i = get_if<int64_t>(*v)) return static_cast<double>(*i);
    if (const auto* u = get_if<uint64_t>(*v)) return static_cast<double>(*u);
  }
  fail_key(key, "expected a float, found " + describe(*v));
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (const auto* b = get_if<bool>(*v)) return *b;
  fail_key(key, "expected a bool, found " + describe(*v));
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (const auto* s = get_if<std::string>(*v)) return *s;
  fail_key(key, "expected a string, found " + describe(*v));
}

const std::vector<std::string>& GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (const auto* s = get_if<std::vector<std::string>>(*v)) return *s;
  fail_key(key, "expected an array of string, found " + describe(*v));
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (const auto* i = get_if<std::vector<int64_t>>(*v)) return *i;
  if (const auto* u = get_if<std::vector<uint64_t>>(*v)) {
    std::vector<int64_t> out;
    out.reserve(u->size());
    for (uint64_t x : *u) {
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_key(key, "element " + std::to_string(x) + " does not fit in int64");
      }
      out.push_back(static_cast<int64_t>(x));
    }
    return out;
  }
  fail_key(key, "expected an integer array, found " + describe(*v));
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  if (const auto* d = get_if<std::vector<double>>(*v)) return *d;
  fail_key(key, "expected a float array, found " + describe(*v));
}

}  // namespace deltaserve::runtime
