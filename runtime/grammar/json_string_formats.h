// Grammars for the JSON Schema string formats OpenAI's strict mode lists (date-time, time,
// date, duration, email, hostname, ipv4, ipv6, uuid) plus uri and uri-reference, which
// agents' tool schemas (MCP's especially) carry. Each rule matches the string's content
// (no quotes); every text it matches is a valid instance of the format, and the characters
// are all ASCII that JSON and the Qwen XML call format carry unescaped. Where the RFC's set
// is not context-free or too large, the rule is a documented subset:
//   date: RFC 3339 full-date with days per month; 02-29 only in leap years (Gregorian rule).
//   time: full-time hh:mm:ss(.fraction of 1-9 digits)?(Z|+hh:mm|-hh:mm); no leap second
//         (:60), uppercase Z only.
//   date-time: date "T" time (uppercase T).
//   duration: RFC 3339 appendix A (ISO 8601 P...), each number 1-9 digits.
//   email: dot-atom local part (1-4 atoms of 1-32 RFC 5322 atext characters) "@" hostname;
//          no quoted local parts or address literals.
//   hostname: RFC 1123, 1-5 labels of 1-48 letters, digits and inner hyphens (so the whole
//             name stays under 253 characters).
//   ipv4: dotted quad, each 0-255 without leading zeros.
//   ipv6: RFC 4291 text form with 1-4 hex digits per group and at most one "::"; no
//         embedded IPv4 tail.
//   uuid: RFC 4122 8-4-4-4-12 hex digits, either case.
//   uri: RFC 3986 URI (scheme ":" hier-part, query, fragment; percent-escapes checked);
//        a port of at most 5 digits, an IP-literal only as IPv6 (no IPvFuture).
//   uri-reference: a uri or an RFC 3986 relative-ref (the empty string included), with the
//        same limits.
//
// Single thread while building.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/json_primitives.h"

namespace deltaserve::runtime::grammar {

// The formats string_format() knows, for error messages.
inline constexpr const char* kSupportedStringFormats =
    "date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid, uri, uri-reference";

// Whether string_format() knows `format`.
bool known_string_format(const std::string& format);

// The content rule of `format`, or nullopt for a format not in the list.
std::optional<uint32_t> string_format(Grammar& g, JsonPrimitives& json, const std::string& format);

}  // namespace deltaserve::runtime::grammar
