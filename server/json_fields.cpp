#include "server/json_fields.h"

#include <cmath>
#include <sstream>

namespace deltaserve::server {
namespace {

std::string format_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

const char* json_type_name(const RequestJson& value) {
  switch (value.type()) {
    case RequestJson::value_t::null: return "null";
    case RequestJson::value_t::object: return "an object";
    case RequestJson::value_t::array: return "an array";
    case RequestJson::value_t::string: return "a string";
    case RequestJson::value_t::boolean: return "a boolean";
    case RequestJson::value_t::number_integer:
    case RequestJson::value_t::number_unsigned: return "an integer";
    case RequestJson::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

std::string element_path(const std::string& array_path, size_t index) {
  return array_path + "[" + std::to_string(index) + "]";
}

int64_t require_integer(const RequestJson& value, const std::string& param, int64_t min_value,
                        int64_t max_value) {
  double as_double = 0.0;
  int64_t result = 0;
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      throw ApiException{invalid_value(param, "the integer is too large.")};
    }
    result = value.get<int64_t>();
    as_double = static_cast<double>(result);
  } else if (value.is_number_float()) {
    as_double = value.get<double>();
    if (!std::isfinite(as_double) || std::floor(as_double) != as_double) {
      throw ApiException{invalid_type(param, "expected an integer, got " +
                                                 format_number(as_double) + ".")};
    }
    if (as_double < -9.2e18 || as_double > 9.2e18) {
      throw ApiException{invalid_value(param, "the integer is too large.")};
    }
    result = static_cast<int64_t>(as_double);
  } else {
    throw ApiException{invalid_type(param, std::string("expected an integer, got ") +
                                               json_type_name(value) + ".")};
  }
  if (result < min_value || result > max_value) {
    throw ApiException{invalid_value(
        param, std::to_string(result) + " is outside the allowed range " +
                   std::to_string(min_value) + ".." + std::to_string(max_value) + ".")};
  }
  return result;
}

JsonFields::JsonFields(const RequestJson& object, std::string path)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) {
    if (path_.empty()) {
      throw ApiException{invalid_type("body", std::string("expected a JSON object, got ") +
                                                  json_type_name(object_) + ".")};
    }
    throw ApiException{
        invalid_type(path_, std::string("expected an object, got ") + json_type_name(object_) + ".")};
  }
}

std::string JsonFields::param(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const RequestJson* JsonFields::get(std::string_view key) {
  known_.emplace(key);
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> JsonFields::number(std::string_view key, double min_value,
                                         double max_value) {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    throw ApiException{invalid_type(param(key), std::string("expected a number, got ") +
                                                    json_type_name(*v) + ".")};
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min_value || x > max_value) {
    throw ApiException{invalid_value(param(key), format_number(x) +
                                                     " is outside the allowed range " +
                                                     format_number(min_value) + ".." +
                                                     format_number(max_value) + ".")};
  }
  return x;
}

std::optional<int64_t> JsonFields::integer(std::string_view key, int64_t min_value,
                                           int64_t max_value) {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  return require_integer(*v, param(key), min_value, max_value);
}

std::optional<bool> JsonFields::boolean(std::string_view key) {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    throw ApiException{invalid_type(param(key), std::string("expected a boolean, got ") +
                                                    json_type_name(*v) + ".")};
  }
  return v->get<bool>();
}

std::optional<std::string> JsonFields::string(std::string_view key) {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    throw ApiException{invalid_type(param(key), std::string("expected a string, got ") +
                                                    json_type_name(*v) + ".")};
  }
  return v->get<std::string>();
}

const RequestJson* JsonFields::object(std::string_view key) {
  const RequestJson* v = get(key);
  if (v && !v->is_object()) {
    throw ApiException{invalid_type(param(key), std::string("expected an object, got ") +
                                                    json_type_name(*v) + ".")};
  }
  return v;
}

const RequestJson* JsonFields::array(std::string_view key) {
  const RequestJson* v = get(key);
  if (v && !v->is_array()) {
    throw ApiException{invalid_type(param(key), std::string("expected an array, got ") +
                                                    json_type_name(*v) + ".")};
  }
  return v;
}

void JsonFields::reject_unknown() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    // A null is absent, whatever the key: clients built on OpenAI's full schema send its
    // fields this server does not know (functions, audio, prediction...) as null.
    if (!it->is_null() && known_.find(it.key()) == known_.end()) {
      throw ApiException{unknown_parameter(param(it.key()))};
    }
  }
}

}  // namespace deltaserve::server
