// The one exception type of the Jinja interpreter: syntax errors, unknown filters/tests, runtime
// type errors, raise_exception() and resource-limit hits all throw TemplateError.
//
// Callers map it to a 400 at request time (bad messages/tools for this template) or to a
// startup error (a template that does not parse). line()/column() are 1-based positions in the
// template source, 0 when unknown (e.g. an error raised while converting the JSON context).
#pragma once

#include <stdexcept>
#include <string>

namespace deltaserve::jinja {

class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& message, int line = 0, int column = 0)
      : std::runtime_error(format(message, line, column)), message_(message), line_(line),
        column_(column) {}

  // The message without the position prefix (what raise_exception() was given, for example).
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  static std::string format(const std::string& message, int line, int column) {
    if (line <= 0) return message;
    return "template line " + std::to_string(line) + ", column " + std::to_string(column) + ": " +
           message;
  }

  std::string message_;
  int line_;
  int column_;
};

}  // namespace deltaserve::jinja
