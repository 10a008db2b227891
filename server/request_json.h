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
// Pure functions; any thread.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace deltaserve::server {

using RequestJson = nlohmann::ordered_json;

// Throws ApiException invalid_json (400) on a syntax error, invalid UTF-8 or a number out of
// range (1e999), with nlohmann's message.
RequestJson parse_request_json(std::string_view text);

}  // namespace deltaserve::server
