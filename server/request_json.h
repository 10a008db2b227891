// The JSON of request bodies: objects keep the client's key order. Chat templates render
// tool schemas and tool-call arguments with `tojson` (or iterate them with `|items`), and
// transformers keeps the order the client sent; a sorted map would reorder every schema and
// so change the prompt (and the prompt cache) against every other server.
//
// nlohmann::ordered_json's own parser searches each object linearly on every key insert,
// quadratic in the number of keys of one object: an untrusted body of a million keys would
// take minutes. parse_request_json builds the same value in linear time instead (a key
// index per open object), with the same syntax errors, depth handling and duplicate-key
// rule (the last value wins, at the first key's place).
//
// Untrusted bodies are bounded while they are parsed: past JsonLimits' nesting depth or
// total number of values the parse stops at once (a 400 naming the limit), so neither the
// builder's frame stack nor nlohmann's own state stack ever grows past max_depth, and a
// body of millions of '[' costs microseconds instead of seconds and hundreds of MB.
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deltaserve::server {

using RequestJson = nlohmann::ordered_json;

// Bounds of one parsed document (ServerConfig's max_json_depth / max_json_elements).
struct JsonLimits {
  int32_t max_depth = 128;           // open arrays/objects at once; the root container is 1
  int64_t max_elements = 1 << 20;    // values of every kind (containers, scalars) in all
};

// Throws ApiException invalid_json (400) on a syntax error, invalid UTF-8 or a number out of
// range (1e999), with nlohmann's message; json_too_deep / json_too_large (400) past `limits`.
RequestJson parse_request_json(std::string_view text, const JsonLimits& limits = {});

}  // namespace deltaserve::server
