// Typed reads from one JSON object of an untrusted request. Each read names the field by its
// full path in the 400 it throws ("messages[2].content", "stream_options.include_usage"),
// and every key read is remembered so the ones nobody asked for can be reported as unknown.
// JSON null counts as absent, as in OpenAI's API. Throws ApiException; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/request_json.h"

namespace deltaserve::server {

// The JSON type of a value in words, for "expected X, got Y" messages.
const char* json_type_name(const RequestJson& value);

class JsonFields {
 public:
  // `object` must outlive this reader. `path` is the object's own path ("" at top level).
  // Throws invalid_type when `object` is not a JSON object.
  JsonFields(const RequestJson& object, std::string path);

  std::string param(std::string_view key) const;  // full path of a key

  // The value, or nullptr when the key is absent or null. Marks the key as known.
  const RequestJson* get(std::string_view key);
  void accept(std::string_view key) { (void)get(key); }  // known, value unused

  std::optional<double> number(std::string_view key, double min_value, double max_value);
  std::optional<int64_t> integer(std::string_view key, int64_t min_value, int64_t max_value);
  std::optional<bool> boolean(std::string_view key);
  std::optional<std::string> string(std::string_view key);
  const RequestJson* object(std::string_view key);  // typed: must be an object
  const RequestJson* array(std::string_view key);   // typed: must be an array

  // Throws unknown_parameter for the first key that no read asked for (a null one is absent).
  void reject_unknown() const;

 private:
  const RequestJson& object_;
  std::string path_;
  std::set<std::string, std::less<>> known_;
};

// Element path helper: "stop" + 2 -> "stop[2]".
std::string element_path(const std::string& array_path, size_t index);

// A value that must be an integer (an integral float such as 16.0 is accepted).
int64_t require_integer(const RequestJson& value, const std::string& param, int64_t min_value,
                        int64_t max_value);

}  // namespace deltaserve::server
