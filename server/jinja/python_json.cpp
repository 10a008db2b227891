#include "server/jinja/python_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "server/jinja/py_string.h"
#include "server/jinja/template_error.h"

namespace deltaserve::jinja {
namespace {

void append_u_escape(std::string& out, unsigned code) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", code & 0xffffu);
  out += buf;
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto escape_ascii = [&](unsigned char c) {
    switch (c) {
      case '"': out += "\\\""; return true;
      case '\\': out += "\\\\"; return true;
      case '\n': out += "\\n"; return true;
      case '\r': out += "\\r"; return true;
      case '\t': out += "\\t"; return true;
      case '\b': out += "\\b"; return true;
      case '\f': out += "\\f"; return true;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          append_u_escape(out, c);
          return true;
        }
        return false;
    }
  };
  if (!ensure_ascii || py::is_ascii(s)) {
    for (char c : s) {
      if (!escape_ascii(static_cast<unsigned char>(c))) out += c;
    }
  } else {
    for (char32_t cp : py::decode(s)) {
      if (cp < 0x80) {
        if (!escape_ascii(static_cast<unsigned char>(cp))) out += static_cast<char>(cp);
      } else if (cp < 0x10000) {
        append_u_escape(out, cp);
      } else {  // UTF-16 surrogate pair, as Python writes astral code points
        char32_t v = cp - 0x10000;
        append_u_escape(out, 0xd800 | (v >> 10));
        append_u_escape(out, 0xdc00 | (v & 0x3ff));
      }
    }
  }
  out += '"';
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {
    item_sep_ = options.item_separator.value_or(options.indent ? "," : ", ");
    key_sep_ = options.key_separator.value_or(": ");
  }

  void dump(std::string& out, const Value& value, int level) {
    switch (value.kind()) {
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out += std::to_string(value.as_int()); return;
      case Value::Kind::kFloat: dump_float(out, value.as_double()); return;
      case Value::Kind::kString: dump_string(out, value.str(), options_.ensure_ascii); return;
      case Value::Kind::kList: dump_list(out, value.list(), level); return;
      case Value::Kind::kDict: dump_dict(out, value.dict(), level); return;
      default:
        throw TemplateError("Object of type " + value.type_name() + " is not JSON serializable");
    }
  }

 private:
  static void dump_float(std::string& out, double d) {
    if (std::isnan(d)) {
      out += "NaN";
    } else if (std::isinf(d)) {
      out += d > 0 ? "Infinity" : "-Infinity";
    } else {
      out += format_float(d);
    }
  }

  void newline(std::string& out, int level) {
    if (!options_.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *options_.indent;
  }

  void dump_list(std::string& out, const List& list, int level) {
    if (list.items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) out += item_sep_;
      newline(out, level + 1);
      dump(out, list.items[i], level + 1);
    }
    newline(out, level);
    out += ']';
  }

  void dump_dict(std::string& out, const Dict& dict, int level) {
    if (dict.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : dict.items) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += item_sep_;
      newline(out, level + 1);
      dump_string(out, entries[i]->first, options_.ensure_ascii);
      out += key_sep_;
      dump(out, entries[i]->second, level + 1);
    }
    newline(out, level);
    out += '}';
  }

  const JsonDumpOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
};

}  // namespace

std::string python_json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  Dumper(options).dump(out, value, 0);
  return out;
}

}  // namespace deltaserve::jinja
