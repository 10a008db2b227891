#include "server/jinja/string_format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "server/jinja/interpreter.h"
#include "server/jinja/py_string.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 (type default)
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char type = 0;
  char grouping = 0;  // ',' or '_' thousands separator (str.format only)
};

// Inserts `sep` every three digits of the integer part of a formatted number.
std::string group_digits(const std::string& body, char sep) {
  size_t begin = body.find_first_of("0123456789");
  if (begin == std::string::npos) return body;
  size_t end = body.find_first_not_of("0123456789", begin);
  if (end == std::string::npos) end = body.size();
  std::string digits = body.substr(begin, end - begin);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += sep;
    grouped += digits[i];
  }
  return body.substr(0, begin) + grouped + body.substr(end);
}

std::string pad(const std::string& body, const Spec& spec, char default_align) {
  int64_t len = static_cast<int64_t>(py::length(body));
  if (spec.width <= len) return body;
  size_t n = static_cast<size_t>(spec.width - len);
  char align = spec.align ? spec.align : default_align;
  char fill = spec.zero && !spec.align ? '0' : spec.fill;
  if (align == '<') return body + std::string(n, fill);
  if (align == '^') return std::string(n / 2, fill) + body + std::string(n - n / 2, fill);
  if (align == '=' || (spec.zero && !spec.align)) {
    size_t sign_len = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    return body.substr(0, sign_len) + std::string(n, fill) + body.substr(sign_len);
  }
  return std::string(n, fill) + body;
}

double to_real(const Value& v, char conv) {
  if (v.is_number()) return v.as_double();
  throw TemplateError(std::string("%") + conv + " format: a real number is required, not " + v.type_name());
}

// Formats one number or string per `spec` (type already resolved).
std::string format_value(const Value& v, Spec spec) {
  char type = spec.type;
  if (type == 0) type = v.is_string() ? 's' : v.is_float() ? 'r' : (v.is_int() || v.is_bool()) ? 'd' : 's';
  if (type == 's' || type == 'r' || type == 'a') {
    std::string body = type == 's' ? v.to_str() : v.repr();
    if (spec.precision >= 0) body = py::slice(body, std::nullopt, spec.precision, std::nullopt);
    return pad(body, spec, '<');
  }
  char buf[512];
  std::string flags;
  if (spec.sign != '-') flags += spec.sign;
  if (spec.alternate) flags += '#';
  if (std::string_view("dixXobc").find(type) != std::string_view::npos) {
    if (type == 'c') {
      std::string out;
      if (v.is_string()) {
        out = v.str();
      } else {
        py::append_utf8(out, static_cast<char32_t>(static_cast<int64_t>(to_real(v, type))));
      }
      return pad(out, spec, '<');
    }
    if (v.is_float() && type != 'd' && type != 'i') throw TemplateError("%x format: an integer is required, not float");
    long long i = v.is_float() ? static_cast<long long>(v.as_double()) : static_cast<long long>(v.is_number() ? v.int_value() : static_cast<int64_t>(to_real(v, type)));
    if (type == 'b') {
      std::string bits;
      unsigned long long u = static_cast<unsigned long long>(i < 0 ? -i : i);
      do { bits.insert(bits.begin(), static_cast<char>('0' + (u & 1))); u >>= 1; } while (u);
      return pad((i < 0 ? "-" : "") + std::string(spec.alternate ? "0b" : "") + bits, spec, '>');
    }
    std::string f = "%" + flags + "ll" + (type == 'i' ? 'd' : type);
    std::snprintf(buf, sizeof(buf), f.c_str(), i);
    std::string body = buf;
    if (spec.grouping) body = group_digits(body, spec.grouping);
    if (type == 'o' && spec.alternate) body = py::replace(body, "0", "0o", 1);
    return pad(body, spec, '>');
  }
  double d = to_real(v, type);
  if (type == 'r') return pad(format_float(d), spec, '>');
  if (type == '%') {
    d *= 100;
    type = 'f';
  }
  int precision = spec.precision >= 0 ? std::min(spec.precision, 300) : 6;
  std::string f = "%" + flags + "." + std::to_string(precision) + type;
  std::snprintf(buf, sizeof(buf), f.c_str(), d);
  std::string body = buf;
  if (spec.grouping) body = group_digits(body, spec.grouping);
  if (spec.type == '%') body += '%';
  return pad(body, spec, '>');
}

int parse_number(const std::string& s, size_t& i) {
  int n = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    n = n * 10 + (s[i++] - '0');
    if (n > 100000) throw TemplateError("format width or precision too large");
  }
  return n;
}

}  // namespace

std::string percent_format(const std::string& format, const Value& operand) {
  std::vector<Value> args;
  bool tuple = operand.is_list() && operand.list().is_tuple;
  if (tuple) args = operand.list().items;
  else args.push_back(operand);
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw TemplateError("incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos || !operand.is_dict()) throw TemplateError("format requires a mapping");
      arg = operand.dict().find(format.substr(i + 1, close - i - 1));
      if (arg == nullptr) throw TemplateError("KeyError: '" + format.substr(i + 1, close - i - 1) + "'");
      used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    for (; i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos; ++i) {
      if (format[i] == '-') spec.align = '<';
      else if (format[i] == '0') spec.zero = true;
      else if (format[i] == '#') spec.alternate = true;
      else spec.sign = format[i];
    }
    spec.width = parse_number(format, i);
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = parse_number(format, i);
    }
    while (i < format.size() && (format[i] == 'l' || format[i] == 'h' || format[i] == 'L')) ++i;
    if (i >= format.size()) throw TemplateError("incomplete format");
    char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (arg == nullptr) {
      if (next_arg >= args.size()) throw TemplateError("not enough arguments for format string");
      arg = &args[next_arg++];
    }
    if (std::string_view("sradiuxXoeEfFgGc").find(conv) == std::string_view::npos) {
      throw TemplateError(std::string("unsupported format character '") + conv + "'");
    }
    spec.type = conv == 'u' ? 'd' : conv;
    if (spec.zero && spec.align == '<') spec.zero = false;
    // printf right-aligns strings too ('%5s'), where str.format left-aligns them.
    if (!spec.align && (conv == 's' || conv == 'r' || conv == 'a' || conv == 'c')) spec.align = '>';
    out += format_value(*arg, spec);
  }
  // Python only complains about unused arguments for tuples and plain values; a list or dict
  // operand is treated as a mapping and may go unused.
  if (!used_mapping && (tuple || !(operand.is_list() || operand.is_dict())) && next_arg < args.size()) {
    throw TemplateError("not all arguments converted during string formatting");
  }
  return out;
}

namespace {

Spec parse_brace_spec(const std::string& s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    spec.zero = true;
    ++i;
  }
  if (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.width = parse_number(s, i);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    spec.precision = parse_number(s, i);
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) throw TemplateError("invalid format specifier '" + s + "'");
  return spec;
}

}  // namespace

std::string brace_format(Interpreter& interp, const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      else throw TemplateError("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec_text;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field.resize(colon);
    }
    char conversion = 0;
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    size_t head_end = field.find_first_of(".[");
    std::string head = field.substr(0, head_end);
    Value value;
    if (head.empty() || std::all_of(head.begin(), head.end(), ::isdigit)) {
      size_t index = head.empty() ? auto_index++ : static_cast<size_t>(std::atoll(head.c_str()));
      if (index >= args.positional.size()) {
        throw TemplateError("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      }
      value = args.positional[index];
    } else {
      const Value* found = nullptr;
      for (const auto& [key, v] : args.keyword) {
        if (key == head) found = &v;
      }
      if (found == nullptr) throw TemplateError("KeyError: '" + head + "'");
      value = *found;
    }
    for (size_t p = head_end; p != std::string::npos && p < field.size();) {
      size_t end = field.find_first_of(".[", p + 1);
      if (field[p] == '.') {
        value = interp.getattr(value, field.substr(p + 1, end - p - 1));
      } else {
        size_t rb = field.find(']', p);
        if (rb == std::string::npos) throw TemplateError("Missing ']' in format string");
        std::string key = field.substr(p + 1, rb - p - 1);
        bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        value = interp.getitem(value, numeric ? Value::integer(std::atoll(key.c_str())) : Value::string(key));
        end = rb + 1 < field.size() ? rb + 1 : std::string::npos;
      }
      p = end;
    }
    if (conversion == 'r' || conversion == 'a') value = Value::string(value.repr());
    else if (conversion == 's') value = Value::string(value.to_str());
    else if (conversion != 0) throw TemplateError(std::string("Unknown conversion specifier ") + conversion);
    out += spec_text.empty() ? value.to_str() : format_value(value, parse_brace_spec(spec_text));
    interp.check_size(out.size());
  }
  return out;
}

}  // namespace deltaserve::jinja
