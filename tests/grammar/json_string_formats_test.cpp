// String formats: valid instances accepted, near misses refused, and random walks whose
// every result passes a small checker of the format.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "tests/grammar/grammar_test_util.h"

namespace deltaserve::runtime::grammar {
namespace {

using test::accepts;
using test::random_walk;
using test::schema_grammar;

std::shared_ptr<const Grammar> format_grammar(const std::string& format) {
  return schema_grammar(R"({"type":"string","format":")" + format + R"("})");
}

void expect_format(const std::string& format, std::initializer_list<const char*> ok,
                   std::initializer_list<const char*> bad) {
  const auto g = format_grammar(format);
  for (const char* s : ok) EXPECT_TRUE(accepts(*g, std::string("\"") + s + "\"")) << format << ": " << s;
  for (const char* s : bad) EXPECT_FALSE(accepts(*g, std::string("\"") + s + "\"")) << format << ": " << s;
}

TEST(JsonStringFormats, Date) {
  expect_format("date", {"2024-01-31", "2023-02-28", "2024-02-29", "2000-02-29", "1999-12-01", "0000-04-30"},
                {"2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "2024-00-10", "2024-01-00", "2024-1-01",
                 "24-01-01", "2024-01-32"});
}

TEST(JsonStringFormats, TimeAndDateTime) {
  expect_format("time", {"00:00:00Z", "23:59:59Z", "12:30:00.123+05:30", "08:00:00-23:59", "10:11:12.5Z"},
                {"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00z", "12:00:00.Z", "12:00:00+5:30",
                 "12:00Z"});
  expect_format("date-time", {"2024-02-29T23:59:59Z", "1985-04-12T23:20:50.52Z", "1996-12-19T16:39:57-08:00"},
                {"2024-02-29 23:59:59Z", "2023-02-29T00:00:00Z", "2024-01-01T00:00:00", "2024-01-01"});
}

TEST(JsonStringFormats, Duration) {
  expect_format("duration", {"P1D", "P3Y6M4DT12H30M5S", "PT1H", "PT5M", "PT20S", "P2W", "P1M", "P1Y2M", "PT1H30M"},
                {"P", "PT", "P1", "P1H", "1D", "P1DT", "P1W2D", "PT1D", "P1S", "P1D2M",
                 "PT1H30S"});  // RFC 3339: an hour takes only minutes after it
}

TEST(JsonStringFormats, EmailAndHostname) {
  expect_format("email", {"a@b", "john.doe+tag@example.com", "x_y@mail.cs.example.edu", "o'neil@ex-ample.org"},
                {"@example.com", "a@", "a..b@example.com", ".a@example.com", "a@-example.com", "a b@c.d",
                 "a@b@c", "a@example..com"});
  expect_format("hostname", {"localhost", "example.com", "a-b.c-d.e", "x1.y2.z3", "A.B"},
                {"", "-a.com", "a-.com", "a..b", ".a", "a.", "a_b.com", "a b"});
}

TEST(JsonStringFormats, IpAddresses) {
  expect_format("ipv4", {"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.99.1"},
                {"256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.04", "a.b.c.d", "1..2.3"});
  expect_format("ipv6", {"::", "::1", "1::", "2001:db8::8a2e:370:7334", "2001:0db8:0000:0000:0000:ff00:0042:8329",
                         "fe80::", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "ABCD:ef01::1"},
                {":", ":::", "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "g::", "1:2:3:4:5:6:7:8::",
                 "::1:2:3:4:5:6:7:8", "1:"});
}

TEST(JsonStringFormats, Uuid) {
  expect_format("uuid", {"123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
                         "ABCDEF01-2345-6789-abcd-ef0123456789"},
                {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
                 "123e4567-e89b-12d3-a456-4266141740000", "g23e4567-e89b-12d3-a456-426614174000"});
}

// Checkers of the formats, written independently of the grammars.
bool digits_at(const std::string& s, size_t pos, size_t n) {
  if (pos + n > s.size()) return false;
  for (size_t i = 0; i < n; ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[pos + i]))) return false;
  return true;
}
int num_at(const std::string& s, size_t pos, size_t n) { return std::stoi(s.substr(pos, n)); }

bool valid_date(const std::string& s) {
  if (s.size() != 10 || !digits_at(s, 0, 4) || s[4] != '-' || !digits_at(s, 5, 2) || s[7] != '-' || !digits_at(s, 8, 2))
    return false;
  const int y = num_at(s, 0, 4), m = num_at(s, 5, 2), d = num_at(s, 8, 2);
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1];
}

bool valid_time(const std::string& s) {
  if (s.size() < 9 || !digits_at(s, 0, 2) || s[2] != ':' || !digits_at(s, 3, 2) || s[5] != ':' || !digits_at(s, 6, 2))
    return false;
  if (num_at(s, 0, 2) > 23 || num_at(s, 3, 2) > 59 || num_at(s, 6, 2) > 59) return false;
  size_t i = 8;
  if (s[i] == '.') {
    const size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return false;
  }
  if (s.substr(i) == "Z") return true;
  return s.size() == i + 6 && (s[i] == '+' || s[i] == '-') && digits_at(s, i + 1, 2) && s[i + 3] == ':' &&
         digits_at(s, i + 4, 2) && num_at(s, i + 1, 2) <= 23 && num_at(s, i + 4, 2) <= 59;
}

bool valid_ipv4(const std::string& s) {
  size_t pos = 0;
  for (int part = 0; part < 4; ++part) {
    size_t end = pos;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
    if (end == pos || end - pos > 3 || (end - pos > 1 && s[pos] == '0') || num_at(s, pos, end - pos) > 255) return false;
    if (part < 3 && (end >= s.size() || s[end] != '.')) return false;
    pos = end + 1;
  }
  return pos == s.size() + 1;
}

bool valid_ipv6(const std::string& s) {
  const size_t dc = s.find("::");
  if (dc != std::string::npos && s.find("::", dc + 1) != std::string::npos) return false;
  auto groups = [](const std::string& part, int& n) {
    if (part.empty()) return true;
    size_t pos = 0;
    while (true) {
      size_t end = part.find(':', pos);
      if (end == std::string::npos) end = part.size();
      if (end == pos || end - pos > 4) return false;
      for (size_t i = pos; i < end; ++i)
        if (!std::isxdigit(static_cast<unsigned char>(part[i]))) return false;
      ++n;
      if (end == part.size()) return true;
      pos = end + 1;
    }
  };
  int n = 0;
  if (dc == std::string::npos) return groups(s, n) && n == 8;
  return groups(s.substr(0, dc), n) && groups(s.substr(dc + 2), n) && n <= 7;
}

TEST(JsonStringFormats, RandomWalksGiveValidInstances) {
  struct Case {
    const char* format;
    bool (*valid)(const std::string&);
  };
  for (const Case& c : {Case{"date", valid_date}, Case{"time", valid_time},
                        Case{"date-time", [](const std::string& s) {
                               return s.size() > 11 && s[10] == 'T' && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
                             }},
                        Case{"ipv4", valid_ipv4}, Case{"ipv6", valid_ipv6}}) {
    const auto g = format_grammar(c.format);
    std::mt19937 rng(13);
    for (int i = 0; i < 300; ++i) {
      const auto text = random_walk(*g, rng, 200);
      ASSERT_TRUE(text.has_value()) << c.format;
      const std::string v = SchemaJson::parse(*text).get<std::string>();
      EXPECT_TRUE(c.valid(v)) << c.format << ": " << v;
    }
  }
}

TEST(JsonStringFormats, RawToolParameterTakesTheFormatUnquoted) {
  SchemaJson t = SchemaJson::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"when":{"type":"string","format":"date"},"code":{"type":"string","minLength":2,"maxLength":3}},
      "required":["when","code"],"additionalProperties":false}}}])");
  const auto g = tool_call_grammar(t, std::nullopt, false);
  auto call = [](const std::string& when, const std::string& code) {
    return "<tool_call>\n<function=f>\n<parameter=when>\n" + when + "\n</parameter>\n<parameter=code>\n" + code +
           "\n</parameter>\n</function>\n</tool_call>";
  };
  EXPECT_TRUE(accepts(*g, call("2024-02-29", "ab")));
  EXPECT_TRUE(accepts(*g, call("2024-02-29", "\xE6\x97\xA5\xE6\x97\xA5\"")));
  EXPECT_FALSE(accepts(*g, call("2023-02-29", "ab")));
  EXPECT_FALSE(accepts(*g, call("\"2024-02-29\"", "ab")));
  EXPECT_FALSE(accepts(*g, call("2024-02-29", "a")));
  EXPECT_FALSE(accepts(*g, call("2024-02-29", "abcd")));
}

}  // namespace
}  // namespace deltaserve::runtime::grammar
