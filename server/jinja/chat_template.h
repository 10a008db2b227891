// Chat-template application with exactly the context transformers' apply_chat_template builds:
//   messages, tools (null when absent), documents (null), add_generation_prompt,
//   the tokenizer's special tokens (bos_token, eos_token when the tokenizer has them),
//   and the caller's extra kwargs (e.g. enable_thinking) merged at the top level, overriding
//   the special tokens as transformers' {**special_tokens_map, **kwargs} does.
//
// Thread safety: free functions over immutable inputs; call from any thread. CPU-bound,
// non-blocking. Errors (bad template, raise_exception(), runtime type errors, limits) are
// TemplateError: a 400 at request time, a startup error when the template itself is bad.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/jinja/template.h"

namespace deltaserve::jinja {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style messages
  nlohmann::ordered_json tools = nullptr;  // an array of tool schemas, or null
  bool add_generation_prompt = false;
  // Extra template variables (chat_template_kwargs), e.g. {"enable_thinking": false}. Must be an
  // object; the names messages, tools, documents and add_generation_prompt are refused, as
  // Python refuses a keyword passed twice.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> bos_token;  // nullopt: undefined in the template
  std::optional<std::string> eos_token;
};

// The render context apply_chat_template would pass to the template.
nlohmann::ordered_json build_chat_context(const ChatTemplateInputs& inputs);

// Renders a parsed template (parse once at startup, render per request).
std::string render_chat(const Template& chat_template, const ChatTemplateInputs& inputs,
                        const RenderOptions& options = {});

// Convenience: parses `template_source` and renders it (parsing costs about as much as a render).
std::string render_chat(std::string_view template_source, const ChatTemplateInputs& inputs,
                        const RenderOptions& options = {});

}  // namespace deltaserve::jinja
