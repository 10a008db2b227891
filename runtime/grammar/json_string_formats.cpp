#include "runtime/grammar/json_string_formats.h"

#include <initializer_list>

#include "runtime/grammar/json_number_bounds.h"

namespace deltaserve::runtime::grammar {
namespace {

ByteSet hex_digits() {
  ByteSet s = ByteSet::range('0', '9');
  s.add_range('a', 'f');
  s.add_range('A', 'F');
  return s;
}

ByteSet alnum() {
  ByteSet s = ByteSet::range('0', '9');
  s.add_range('a', 'z');
  s.add_range('A', 'Z');
  return s;
}

// Builds the format rules of one grammar.
class Formats {
 public:
  Formats(Grammar& g, JsonPrimitives& json) : g_(g), json_(json) {}

  // A rule of one alternative: the concatenation of `parts`.
  uint32_t seq(std::string_view name, std::initializer_list<Grammar::Sequence> parts) {
    const uint32_t r = g_.add_rule(std::string(name));
    g_.add_alternative(r, seq_of(parts));
    return r;
  }
  static Grammar::Sequence seq_of(std::initializer_list<Grammar::Sequence> parts) {
    Grammar::Sequence s;
    for (const auto& p : parts) s.insert(s.end(), p.begin(), p.end());
    return s;
  }
  Grammar::Sequence lit(std::string_view text) { return g_.literal(text); }
  Grammar::Sequence call(uint32_t rule) { return {Grammar::call(rule)}; }
  Grammar::Sequence range(const char* a, const char* b) { return call(fixed_width_range(g_, a, b)); }
  Grammar::Sequence rep(const ByteSet& set, int min, int max) { return json_.repeat(set, min, max); }
  // `rule` (prefix rule)* between min and max times in all: rule (prefix rule){min-1, max-1}.
  uint32_t separated(uint32_t item, std::string_view sep, int min, int max) {
    uint32_t tail = g_.add_rule("separated_end");
    g_.add_alternative(tail, {});
    for (int k = max - 1; k > 0; --k) {
      const uint32_t r = g_.add_rule("separated");
      Grammar::Sequence s = lit(sep);
      s.push_back(Grammar::call(item));
      s.push_back(Grammar::call(tail));
      g_.add_alternative(r, s);
      if (k > min - 1) g_.add_alternative(r, {});
      tail = r;
    }
    return seq("separated_list", {call(item), call(tail)});
  }

  uint32_t date() {
    const uint32_t r = g_.add_rule("date");
    const Grammar::Sequence year = rep(ByteSet::range('0', '9'), 4, 4);
    const uint32_t d28 = fixed_width_range(g_, "01", "28"), d30 = fixed_width_range(g_, "01", "30"),
                   d31 = fixed_width_range(g_, "01", "31");
    const uint32_t month_day = g_.add_rule("month_day");
    auto add_month = [&](const char* month, uint32_t days) {
      Grammar::Sequence s = lit(month);
      g_.append_literal(s, "-");
      s.push_back(Grammar::call(days));
      g_.add_alternative(month_day, s);
    };
    for (const char* m : {"01", "03", "05", "07", "08", "10", "12"}) add_month(m, d31);
    for (const char* m : {"04", "06", "09", "11"}) add_month(m, d30);
    Grammar::Sequence feb = lit("02-");
    feb.push_back(Grammar::call(d28));
    g_.add_alternative(month_day, feb);
    Grammar::Sequence normal = year;
    g_.append_literal(normal, "-");
    normal.push_back(Grammar::call(month_day));
    g_.add_alternative(r, normal);
    // Leap years: a year divisible by 4 whose last two digits are not 00, or a century
    // divisible by 4 followed by 00.
    const uint32_t by4 = g_.add_rule("divisible_by_4");  // two digits, a multiple of 4
    g_.add_alternative(by4, {g_.bytes(ByteSet::of("02468")), g_.bytes(ByteSet::of("048"))});
    g_.add_alternative(by4, {g_.bytes(ByteSet::of("13579")), g_.bytes(ByteSet::of("26"))});
    const uint32_t by4_not_00 = g_.add_rule("divisible_by_4_not_00");
    g_.add_alternative(by4_not_00, {g_.bytes(ByteSet::of("0")), g_.bytes(ByteSet::of("48"))});
    g_.add_alternative(by4_not_00, {g_.bytes(ByteSet::of("2468")), g_.bytes(ByteSet::of("048"))});
    g_.add_alternative(by4_not_00, {g_.bytes(ByteSet::of("13579")), g_.bytes(ByteSet::of("26"))});
    Grammar::Sequence leap1 = rep(ByteSet::range('0', '9'), 2, 2);
    leap1.push_back(Grammar::call(by4_not_00));
    g_.append_literal(leap1, "-02-29");
    g_.add_alternative(r, leap1);
    Grammar::Sequence leap2{Grammar::call(by4)};
    g_.append_literal(leap2, "00-02-29");
    g_.add_alternative(r, leap2);
    return r;
  }

  uint32_t time() {
    const uint32_t fraction = g_.add_rule("time_fraction");
    Grammar::Sequence f = lit(".");
    for (const Element& e : rep(ByteSet::range('0', '9'), 1, 9)) f.push_back(e);
    g_.add_alternative(fraction, f);
    g_.add_alternative(fraction, {});
    const uint32_t offset = g_.add_rule("time_offset");
    g_.add_alternative(offset, lit("Z"));
    g_.add_alternative(offset, {g_.bytes(ByteSet::of("+-")), Grammar::call(fixed_width_range(g_, "00", "23")),
                                g_.bytes(ByteSet::of(":")), Grammar::call(fixed_width_range(g_, "00", "59"))});
    return seq("time", {range("00", "23"), lit(":"), range("00", "59"), lit(":"), range("00", "59"), call(fraction),
                        call(offset)});
  }

  uint32_t duration() {
    const uint32_t num = seq("duration_number", {rep(ByteSet::range('0', '9'), 1, 9)});
    auto unit = [&](char letter, uint32_t next) {  // num letter next?  (next: UINT32_MAX = none)
      const uint32_t r = g_.add_rule(std::string("duration_") + letter);
      Grammar::Sequence s{Grammar::call(num), g_.bytes(ByteSet::of(std::string_view(&letter, 1)))};
      if (next != UINT32_MAX) s.push_back(Grammar::call(next));
      g_.add_alternative(r, s);
      return r;
    };
    auto optional = [&](uint32_t rule) {
      const uint32_t r = g_.add_rule("duration_optional");
      g_.add_alternative(r, {Grammar::call(rule)});
      g_.add_alternative(r, {});
      return r;
    };
    const uint32_t second = unit('S', UINT32_MAX);
    const uint32_t minute = unit('M', optional(second));
    const uint32_t hour = unit('H', optional(minute));
    const uint32_t time = g_.add_rule("duration_time");
    for (const uint32_t r : {hour, minute, second}) {
      g_.add_alternative(time, {g_.bytes(ByteSet::of("T")), Grammar::call(r)});
    }
    const uint32_t day = unit('D', UINT32_MAX);
    const uint32_t month = unit('M', optional(day));
    const uint32_t year = unit('Y', optional(month));
    const uint32_t opt_time = optional(time);
    const uint32_t r = g_.add_rule("duration");
    for (const uint32_t d : {day, month, year}) {
      g_.add_alternative(r, {g_.bytes(ByteSet::of("P")), Grammar::call(d), Grammar::call(opt_time)});
    }
    g_.add_alternative(r, {g_.bytes(ByteSet::of("P")), Grammar::call(time)});
    g_.add_alternative(r, {g_.bytes(ByteSet::of("P")), Grammar::call(unit('W', UINT32_MAX))});
    return r;
  }

  uint32_t hostname() {
    const uint32_t label = g_.add_rule("hostname_label");
    ByteSet inner = alnum();
    inner.add('-');
    g_.add_alternative(label, {g_.bytes(alnum())});
    Grammar::Sequence longer{g_.bytes(alnum())};
    for (const Element& e : rep(inner, 0, 46)) longer.push_back(e);
    longer.push_back(g_.bytes(alnum()));
    g_.add_alternative(label, longer);
    return separated(label, ".", 1, 5);
  }

  uint32_t email() {
    const ByteSet atext = [] {
      ByteSet s = alnum();
      for (const char c : std::string_view("!#$%&'*+/=?^_`{|}~-")) s.add(static_cast<uint8_t>(c));
      return s;
    }();
    const uint32_t atom = seq("email_atom", {rep(atext, 1, 32)});
    return seq("email", {call(separated(atom, ".", 1, 4)), lit("@"), call(hostname())});
  }

  uint32_t ipv4() {
    const uint32_t octet = unsigned_range(g_, 0, 255);
    return separated(octet, ".", 4, 4);
  }

  // A deterministic walk over (groups written, "::" seen): at most 8 groups without "::",
  // at most 7 with it.
  uint32_t ipv6() {
    const uint32_t h16 = seq("ipv6_group", {rep(hex_digits(), 1, 4)});
    // after_compressed[n]: "::" seen and n groups in all; may end or take ":" h16 (n < 7).
    uint32_t after_compressed[8];
    for (int n = 7; n >= 0; --n) {
      after_compressed[n] = g_.add_rule("ipv6_compressed");
      g_.add_alternative(after_compressed[n], {});
      if (n < 7 && n > 0)
        g_.add_alternative(after_compressed[n], {g_.bytes(ByteSet::of(":")), Grammar::call(h16),
                                                 Grammar::call(after_compressed[n + 1])});
    }
    // right_after_colons[n]: "::" just written after n groups: end, or a group (n + 1 <= 7).
    // plain[n]: n groups written without "::" (n >= 1).
    uint32_t plain[9];
    plain[8] = g_.add_rule("ipv6_full");
    g_.add_alternative(plain[8], {});
    for (int n = 7; n >= 1; --n) {
      const uint32_t colons = g_.add_rule("ipv6_after_colons");
      g_.add_alternative(colons, {});
      if (n < 7) g_.add_alternative(colons, {Grammar::call(h16), Grammar::call(after_compressed[n + 1])});
      plain[n] = g_.add_rule("ipv6_plain");
      g_.add_alternative(plain[n], {g_.bytes(ByteSet::of(":")), g_.bytes(ByteSet::of(":")), Grammar::call(colons)});
      g_.add_alternative(plain[n], {g_.bytes(ByteSet::of(":")), Grammar::call(h16), Grammar::call(plain[n + 1])});
    }
    const uint32_t lead = g_.add_rule("ipv6_leading_colons");  // "::" before any group
    g_.add_alternative(lead, {});
    g_.add_alternative(lead, {Grammar::call(h16), Grammar::call(after_compressed[1])});
    const uint32_t r = g_.add_rule("ipv6");
    g_.add_alternative(r, {g_.bytes(ByteSet::of(":")), g_.bytes(ByteSet::of(":")), Grammar::call(lead)});
    g_.add_alternative(r, {Grammar::call(h16), Grammar::call(plain[1])});
    return r;
  }

  // RFC 3986 section 3 / 4.2, written so alternatives fork only over a shared prefix (a
  // userinfo before "@" against a host; a scheme before ":" against a relative path).
  // IPv4address is left out of host: reg-name already spells every dotted quad.
  uint32_t uri(bool reference) {
    ByteSet unreserved = alnum();
    for (const char c : std::string_view("-._~!$&'()*+,;=")) unreserved.add(static_cast<uint8_t>(c));  // + sub-delims
    auto chars = [&](std::string_view name, std::string_view extra) {  // unreserved / sub-delims / extra / "%" HEX HEX
      ByteSet plain = unreserved;
      for (const char c : extra) plain.add(static_cast<uint8_t>(c));
      const uint32_t r = g_.add_rule(std::string(name));
      g_.add_alternative(r, {g_.bytes(plain)});
      g_.add_alternative(r, {g_.bytes(ByteSet::of("%")), g_.bytes(hex_digits()), g_.bytes(hex_digits())});
      return r;
    };
    auto star = [&](uint32_t rule) { return json_.repeat(Grammar::call(rule), 0, -1); };
    const uint32_t pchar = chars("uri_pchar", ":@"), path_char = chars("uri_path_char", ":@/"),
                   query_char = chars("uri_query_char", ":@/?"), userinfo_char = chars("uri_userinfo_char", ":"),
                   reg_name_char = chars("uri_reg_name_char", ""), nc_char = chars("uri_segment_nc_char", "@");
    // ("?" query)? ("#" fragment)?
    const uint32_t fragment = g_.add_rule("uri_fragment");
    g_.add_alternative(fragment, {});
    g_.add_alternative(fragment, seq_of({lit("#"), star(query_char)}));
    const uint32_t tail = g_.add_rule("uri_query_fragment");
    g_.add_alternative(tail, {Grammar::call(fragment)});
    g_.add_alternative(tail, seq_of({lit("?"), star(query_char), call(fragment)}));
    // authority path-abempty, after "//"
    const uint32_t host = g_.add_rule("uri_host");
    g_.add_alternative(host, seq_of({lit("["), call(ipv6()), lit("]")}));
    g_.add_alternative(host, star(reg_name_char));
    const uint32_t port = g_.add_rule("uri_port");
    g_.add_alternative(port, {});
    g_.add_alternative(port, seq_of({lit(":"), rep(ByteSet::range('0', '9'), 0, 5)}));
    const uint32_t abempty = g_.add_rule("uri_path_abempty");
    g_.add_alternative(abempty, {});
    g_.add_alternative(abempty, seq_of({lit("/"), star(path_char)}));
    const uint32_t authority = g_.add_rule("uri_authority_path");
    g_.add_alternative(authority, seq_of({lit("//"), star(userinfo_char), lit("@"), call(host), call(port), call(abempty)}));
    g_.add_alternative(authority, seq_of({lit("//"), call(host), call(port), call(abempty)}));
    // path-absolute / path-rootless / path-empty: "/" (pchar path_char*)? | pchar path_char* | ""
    const uint32_t rooted = g_.add_rule("uri_path_absolute");
    g_.add_alternative(rooted, {});
    g_.add_alternative(rooted, seq_of({call(pchar), star(path_char)}));
    const uint32_t hier = g_.add_rule("uri_hier_part");
    g_.add_alternative(hier, {Grammar::call(authority)});
    g_.add_alternative(hier, seq_of({lit("/"), call(rooted)}));
    g_.add_alternative(hier, seq_of({call(pchar), star(path_char)}));
    g_.add_alternative(hier, {});
    ByteSet scheme_rest = alnum();
    scheme_rest.add('+');
    scheme_rest.add('-');
    scheme_rest.add('.');
    ByteSet alpha = ByteSet::range('a', 'z');
    alpha.add_range('A', 'Z');
    // A scheme of at most 32 characters (registered ones are far shorter), so a sampled scheme
    // meets its ":" soon.
    const uint32_t absolute = seq("uri", {{g_.bytes(alpha)}, rep(scheme_rest, 0, 31), lit(":"), call(hier), call(tail)});
    if (!reference) return absolute;
    // relative-ref: as hier-part, but a first segment without ":" (path-noscheme) instead of
    // path-rootless, and no scheme.
    const uint32_t noscheme_rest = g_.add_rule("uri_path_noscheme_rest");
    g_.add_alternative(noscheme_rest, {});
    g_.add_alternative(noscheme_rest, seq_of({lit("/"), star(path_char)}));
    const uint32_t relative = g_.add_rule("uri_relative_part");
    g_.add_alternative(relative, {Grammar::call(authority)});
    g_.add_alternative(relative, seq_of({lit("/"), call(rooted)}));
    g_.add_alternative(relative, seq_of({call(nc_char), star(nc_char), call(noscheme_rest)}));
    g_.add_alternative(relative, {});
    const uint32_t r = g_.add_rule("uri_reference");
    g_.add_alternative(r, {Grammar::call(absolute)});
    g_.add_alternative(r, seq_of({call(relative), call(tail)}));
    return r;
  }

  uint32_t uuid() {
    const ByteSet h = hex_digits();
    return seq("uuid", {rep(h, 8, 8), lit("-"), rep(h, 4, 4), lit("-"), rep(h, 4, 4), lit("-"), rep(h, 4, 4), lit("-"),
                        rep(h, 12, 12)});
  }

 private:
  Grammar& g_;
  JsonPrimitives& json_;
};

}  // namespace

bool known_string_format(const std::string& format) {
  for (const char* known : {"date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri",
                            "uri-reference"}) {
    if (format == known) return true;
  }
  return false;
}

std::optional<uint32_t> string_format(Grammar& g, JsonPrimitives& json, const std::string& format) {
  Formats f(g, json);
  if (format == "date") return f.date();
  if (format == "time") return f.time();
  if (format == "date-time") return f.seq("date_time", {f.call(f.date()), f.lit("T"), f.call(f.time())});
  if (format == "duration") return f.duration();
  if (format == "email") return f.email();
  if (format == "hostname") return f.hostname();
  if (format == "ipv4") return f.ipv4();
  if (format == "ipv6") return f.ipv6();
  if (format == "uuid") return f.uuid();
  if (format == "uri") return f.uri(false);
  if (format == "uri-reference") return f.uri(true);
  return std::nullopt;
}

}  // namespace deltaserve::runtime::grammar
