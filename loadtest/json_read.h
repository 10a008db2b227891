// Reads of JSON the server sent, which the tool must survive whatever it holds: a missing
// key or a value of another type gives the fallback instead of throwing. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace deltaserve::loadtest {

inline std::string json_string(const nlohmann::json& object, const char* key,
                               const std::string& fallback = "") {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

inline int64_t json_int(const nlohmann::json& object, const char* key, int64_t fallback = 0) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

}  // namespace deltaserve::loadtest
