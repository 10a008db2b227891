#include "server/jinja/chat_template.h"

namespace deltaserve::jinja {

nlohmann::ordered_json build_chat_context(const ChatTemplateInputs& inputs) {
  if (!inputs.messages.is_array()) throw TemplateError("messages must be a JSON array");
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
    throw TemplateError("tools must be a JSON array or null");
  }
  if (!inputs.extra_kwargs.is_object()) throw TemplateError("chat template kwargs must be an object");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = inputs.messages;
  context["tools"] = inputs.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  if (inputs.bos_token) context["bos_token"] = *inputs.bos_token;
  if (inputs.eos_token) context["eos_token"] = *inputs.eos_token;
  for (const auto& [key, value] : inputs.extra_kwargs.items()) {
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      throw TemplateError("chat template kwarg '" + key + "' is reserved");
    }
    context[key] = value;
  }
  return context;
}

std::string render_chat(const Template& chat_template, const ChatTemplateInputs& inputs,
                        const RenderOptions& options) {
  return chat_template.render(build_chat_context(inputs), options);
}

std::string render_chat(std::string_view template_source, const ChatTemplateInputs& inputs,
                        const RenderOptions& options) {
  return render_chat(Template::parse(template_source), inputs, options);
}

}  // namespace deltaserve::jinja
