// render_chat builds the same context as transformers' apply_chat_template.
#include <gtest/gtest.h>

#include "server/jinja/chat_template.h"

namespace deltaserve::jinja {
namespace {

using Json = nlohmann::ordered_json;

const char* const kProbe =
    "{{ messages | length }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|"
    "{{ bos_token is defined }}|{{ eos_token }}|{{ enable_thinking | default('unset') }}";

TEST(RenderChat, BuildsTransformersContext) {
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  inputs.eos_token = "<|im_end|>";
  EXPECT_EQ(render_chat(kProbe, inputs), "1|None|None|False|False|<|im_end|>|unset");

  inputs.add_generation_prompt = true;
  inputs.tools = Json::parse(R"([{"type": "function"}])");
  inputs.bos_token = "<s>";
  inputs.extra_kwargs = {{"enable_thinking", false}, {"eos_token", "override"}};
  EXPECT_EQ(render_chat(kProbe, inputs),
            "1|[{'type': 'function'}]|None|True|True|override|False");
}

TEST(RenderChat, AcceptsPlainJsonWithSortedKeys) {
  // nlohmann::json converts implicitly; it sorts object keys, so tojson output is sorted too.
  nlohmann::json context = {{"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(Template::parse("{{ d | tojson }}").render(context), R"({"a": 2, "b": 1})");
}

TEST(RenderChat, RejectsReservedKwargsAndBadShapes) {
  ChatTemplateInputs inputs;
  inputs.extra_kwargs = {{"messages", Json::array()}};
  EXPECT_THROW(render_chat("x", inputs), TemplateError);
  inputs.extra_kwargs = Json::array();
  EXPECT_THROW(render_chat("x", inputs), TemplateError);
  inputs.extra_kwargs = Json::object();
  inputs.tools = "not a list";
  EXPECT_THROW(render_chat("x", inputs), TemplateError);
  inputs.tools = nullptr;
  inputs.messages = Json::object();
  EXPECT_THROW(render_chat("x", inputs), TemplateError);
}

TEST(RenderChat, ChatMLTemplateRendersAConversation) {
  const Template chatml = Template::parse(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  inputs.add_generation_prompt = true;
  EXPECT_EQ(render_chat(chatml, inputs),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace deltaserve::jinja
