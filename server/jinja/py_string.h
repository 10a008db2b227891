// Python str semantics over UTF-8 std::string: Python indexes, slices and measures strings in
// code points and treats Unicode whitespace as whitespace, so templates that slice or strip
// non-ASCII text must do the same to render byte-identically.
//
// Case mapping (upper/lower/title/capitalize) uses the simple mappings of ASCII, Latin-1,
// Latin Extended-A, Greek, Cyrillic and fullwidth Latin, plus 'ß'.upper() == 'SS'; other
// scripts and Python's other multi-character mappings are left unchanged. Invalid UTF-8 bytes decode as U+FFFD-free
// single "code points" 0x80..0xFF so nothing is lost or thrown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::jinja::py {

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
bool is_ascii(std::string_view s);
size_t length(std::string_view s);  // in code points
bool is_space(char32_t c);          // str.isspace() for one code point

// The indexes a Python slice [start:stop:step] selects from a sequence of `length` items
// (negative indexes count from the end; step 0 throws TemplateError).
std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step);
// Python slice semantics on code points.
std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step);
// s[i] with negative i; std::nullopt when out of range.
std::optional<std::string> at(std::string_view s, int64_t index);

enum class StripSide { kBoth, kLeft, kRight };
// chars == nullopt strips Unicode whitespace, as str.strip() does.
std::string strip(std::string_view s, const std::optional<std::string>& chars, StripSide side);
// sep == nullopt splits on whitespace runs and drops empty pieces; maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view replacement,
                    int64_t count);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
// str.islower() / str.isupper(): at least one cased character, and all of them in that case.
bool has_only_case(std::string_view s, bool upper_case);
// Index in code points of the first/last occurrence, -1 when absent.
int64_t find(std::string_view s, std::string_view sub, bool from_right);
int64_t count(std::string_view s, std::string_view sub);

}  // namespace deltaserve::jinja::py
