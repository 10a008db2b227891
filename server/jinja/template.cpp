#include "server/jinja/template.h"

#include "server/jinja/ast.h"
#include "server/jinja/interpreter.h"
#include "server/jinja/lexer.h"
#include "server/jinja/parser.h"

namespace deltaserve::jinja {

struct Program {
  Body body;
};

Template Template::parse(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->body = Parser(tokenize(source)).parse_template();
  return Template(std::move(program));
}

std::string Template::render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
  if (!context.is_object()) throw TemplateError("the render context must be a JSON object");
  Value root = Value::from_json(context);
  Interpreter interpreter(options);
  try {
    return interpreter.render(program_->body, root);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {  // a bug of ours must still be a clean 400, not a crash
    throw TemplateError(std::string("internal template error: ") + e.what());
  }
}

}  // namespace deltaserve::jinja
