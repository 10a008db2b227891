// Typed reads of a HF-style config.json whose fields may sit in a nested section (text_config
// of a multimodal wrapper, dflash_config of a DFlash draft model) or at the top level: the
// section is looked up first. Every failure throws std::runtime_error naming the file and the
// field ("<source>: '<field>': <what>").
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace deltaserve::runtime {

class ConfigFields {
 public:
  using json = nlohmann::json;

  // root must outlive this; section: the nested object looked up first (absent: top level only).
  ConfigFields(const json& root, const std::string& section, std::string source) : root_(root), source_(std::move(source)) {
    if (!root.is_object()) throw std::runtime_error(source_ + ": not a JSON object");
    const auto it = root.find(section);
    if (it != root.end() && it->is_object()) section_ = &*it;
  }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw std::runtime_error(source_ + ": '" + field + "': " + what);
  }

  // The field's value, or null when absent or JSON null.
  const json* find(const std::string& field) const {
    if (section_ != nullptr) {
      const auto it = section_->find(field);
      if (it != section_->end() && !it->is_null()) return &*it;
    }
    const auto it = root_.find(field);
    return it != root_.end() && !it->is_null() ? &*it : nullptr;
  }

  // A required integer (at most 2^40).
  int64_t get_int(const std::string& field) const {
    const json* v = integer(field);
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t{1} << 40)) fail(field, "out of range");
    return v->get<int64_t>();
  }
  int64_t get_int(const std::string& field, int64_t fallback) const {
    return find(field) != nullptr ? get_int(field) : fallback;
  }
  // A required integer within [min, max].
  int64_t get_int_in(const std::string& field, int64_t min, int64_t max) const {
    const int64_t x = integer(field)->get<int64_t>();
    if (x < min || x > max) fail(field, std::to_string(x) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return x;
  }
  double get_float(const json* v, const std::string& field, double fallback) const {
    if (v == nullptr) return fallback;
    if (!v->is_number()) fail(field, "expected a number, found " + v->dump());
    return v->get<double>();
  }
  double get_float(const std::string& field, double fallback) const { return get_float(find(field), field, fallback); }
  bool get_bool(const std::string& field, bool fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(field, "expected true or false, found " + v->dump());
    return v->get<bool>();
  }
  // bos/eos: an integer, or a list whose first entry is used; absent -> -1.
  int32_t get_token(const std::string& field) const {
    const json* v = find(field);
    if (v != nullptr && v->is_array() && !v->empty()) v = &(*v)[0];
    if (v == nullptr || (v->is_array() && v->empty())) return -1;
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail(field, "expected a token id, found " + v->dump());
    return static_cast<int32_t>(v->get<int64_t>());
  }

 private:
  const json* integer(const std::string& field) const {
    const json* v = find(field);
    if (v == nullptr) fail(field, "missing");
    if (!v->is_number_integer()) fail(field, "expected an integer, found " + v->dump());
    return v;
  }

  const json& root_;
  const json* section_ = nullptr;
  std::string source_;
};

}  // namespace deltaserve::runtime
