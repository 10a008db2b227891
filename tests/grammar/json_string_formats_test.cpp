// String formats: valid instances accepted, near misses refused, and random walks whose
// every result passes a small checker of the format.
#include <gtest/gtest.h>

#include <algorithm>
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

TEST(JsonStringFormats, Uri) {
  expect_format("uri", {"https://example.com", "http://user:pw@[2001:db8::1]:8080/a/b?q=1&r=%2F#frag",
                        "urn:isbn:0451450523", "mailto:a@b.c", "file:///etc/hosts", "a:", "x+y.z-w:/p//q",
                        "tag:example.com,2024:x", "http://h/%41%7e?/?#/?", "s://"},
                {"", "example.com", "/a/b", "1http://x", "http://exa mple.com", "http://x/%4", "http://x/%zz",
                 "http://[::1/", "http://x:80a/", "http://x/a#b#c", "ht^tp://x", "http://x/{",
                 "abcdefghijklmnopqrstuvwxyz0123456:x"});  // a scheme over 32 characters (the subset)
}

TEST(JsonStringFormats, UriReference) {
  expect_format("uri-reference", {"", "https://example.com/x", "/a/b?c", "a/b:c", "../x", "?q", "#f", "//host/p",
                                  "./a:b", "%41b"},
                {"a:b c", "a b", "http://x/%4", "a/b#c#d", "//[zz]/", "1a:b"});
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

// RFC 3986: split as appendix B's regular expression splits, then each part's characters
// checked against the ABNF of section 3.
bool pct_chars(const std::string& s, const std::string& extra) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '%') {
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
        return false;
      i += 2;
    } else if (!std::isalnum(c) && std::string("-._~!$&'()*+,;=").find(static_cast<char>(c)) == std::string::npos &&
               extra.find(static_cast<char>(c)) == std::string::npos) {
      return false;
    }
  }
  return true;
}

bool valid_uri_reference(const std::string& s, bool absolute) {
  // Appendix B: ^(([^:/?#]+):)?(//([^/?#]*))?([^?#]*)(\?([^#]*))?(#(.*))?
  size_t pos = 0;
  const size_t colon = s.find_first_of(":/?#");
  const bool has_scheme = colon != std::string::npos && colon > 0 && s[colon] == ':';
  if (absolute && !has_scheme) return false;
  if (has_scheme) {
    const std::string scheme = s.substr(0, colon);
    if (!std::isalpha(static_cast<unsigned char>(scheme[0]))) return false;
    for (const char c : scheme)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
    pos = colon + 1;
  }
  const bool has_authority = s.compare(pos, 2, "//") == 0;
  std::string authority;
  if (has_authority) {
    const size_t end = std::min(s.find_first_of("/?#", pos + 2), s.size());
    authority = s.substr(pos + 2, end - pos - 2);
    pos = end;
  }
  const size_t path_end = std::min(s.find_first_of("?#", pos), s.size());
  const std::string path = s.substr(pos, path_end - pos);
  pos = path_end;
  std::string query, fragment;
  if (pos < s.size() && s[pos] == '?') {
    const size_t end = std::min(s.find('#', pos), s.size());
    query = s.substr(pos + 1, end - pos - 1);
    pos = end;
  }
  if (pos < s.size()) fragment = s.substr(pos + 1);
  if (has_authority) {
    if (const size_t at = authority.find('@'); at != std::string::npos) {
      if (!pct_chars(authority.substr(0, at), ":")) return false;
      authority = authority.substr(at + 1);
    }
    std::string host = authority, port;
    if (!authority.empty() && authority[0] == '[') {
      const size_t close = authority.find(']');
      if (close == std::string::npos || !valid_ipv6(authority.substr(1, close - 1))) return false;
      host = authority.substr(0, close + 1);
      port = authority.substr(close + 1);
      if (!port.empty() && port[0] != ':') return false;
    } else if (const size_t port_at = authority.rfind(':'); port_at != std::string::npos) {
      host = authority.substr(0, port_at);
      port = authority.substr(port_at);
    }
    if (host.empty() || host[0] != '[') {
      if (!pct_chars(host, "")) return false;
    }
    for (size_t i = 1; i < port.size(); ++i)
      if (!std::isdigit(static_cast<unsigned char>(port[i]))) return false;
    if (!path.empty() && path[0] != '/') return false;
  } else if (!has_scheme) {
    // path-noscheme: no ':' in the first segment (appendix B would have read it as a scheme).
    if (path.substr(0, path.find('/')).find(':') != std::string::npos) return false;
  }
  return pct_chars(path, ":@/") && pct_chars(query, ":@/?") && pct_chars(fragment, ":@/?");
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
                        Case{"ipv4", valid_ipv4}, Case{"ipv6", valid_ipv6},
                        Case{"uri", [](const std::string& s) { return valid_uri_reference(s, true); }},
                        Case{"uri-reference", [](const std::string& s) { return valid_uri_reference(s, false); }}}) {
    const auto g = format_grammar(c.format);
    std::mt19937 rng(13);
    for (int i = 0; i < 300; ++i) {
      const auto text = random_walk(*g, rng, 4000);  // a URI ends only where the walk picks its closing quote
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
