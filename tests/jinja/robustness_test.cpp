// Untrusted templates and inputs never crash: randomly mutated real templates either parse and
// render or fail with a TemplateError. Deterministic (fixed seed) so CI failures reproduce.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "server/jinja/chat_template.h"

namespace deltaserve::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Deletes, duplicates or swaps in template syntax at random places.
std::string mutate(std::string text, std::mt19937& rng) {
  static const char* const kSnippets[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[",
                                          "]", "'", "\"", "|", ".", ",", " if ", " else ",
                                          "{% endif %}", "{% for x in y %}", "{% endfor %}",
                                          "\\", "\n", "~", "*", "**", "//", " is ", " not "};
  int num_edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < num_edits && !text.empty(); ++i) {
    size_t pos = rng() % text.size();
    switch (rng() % 3) {
      case 0: text.erase(pos, 1 + rng() % 8); break;
      case 1: text.insert(pos, kSnippets[rng() % std::size(kSnippets)]); break;
      default: {
        size_t len = std::min<size_t>(1 + rng() % 40, text.size() - pos);
        text.insert(rng() % text.size(), text.substr(pos, len));
      }
    }
  }
  return text;
}

TEST(Robustness, MutatedTemplatesNeverCrash) {
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
    {"role": "assistant", "content": "<think>r</think>a", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": [1, {"y": null}]}}}]},
    {"role": "tool", "content": "out"},
    {"role": "user", "content": "bye"}])");
  inputs.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  inputs.add_generation_prompt = true;
  inputs.eos_token = "</s>";
  RenderOptions options;
  options.max_steps = 20'000;
  options.max_output_bytes = 1 << 20;
  options.local_time = [] { return std::tm{}; };

  std::mt19937 rng(1234);
  int num_rendered = 0;
  for (const char* path : {"tests/fixtures/chat_templates/qwen3_5.jinja",
                           "tests/fixtures/chat_templates/kitchen_sink.jinja",
                           "tests/fixtures/chat_templates/llama3_style.jinja"}) {
    const std::string original = read_file(path);
    ASSERT_FALSE(original.empty()) << path;
    for (int i = 0; i < 200; ++i) {
      const std::string source = mutate(original, rng);
      try {
        render_chat(source, inputs, options);
        ++num_rendered;
      } catch (const TemplateError&) {
        // Expected for most mutations; anything else (or a crash) fails the test.
      }
    }
  }
  EXPECT_GT(num_rendered, 0);
}

TEST(Robustness, HostileInputsFailCleanly) {
  const Template tmpl = Template::parse("{{ messages | tojson }}{{ messages[0].content * 3 }}");
  ChatTemplateInputs inputs;
  inputs.messages = Json::array({Json::object({{"content", std::string(1 << 20, 'x')}})});
  RenderOptions options;
  options.max_output_bytes = 2 << 20;
  EXPECT_THROW(render_chat(tmpl, inputs, options), TemplateError);
  inputs.messages = Json::array({Json::object({{"content", "\xff\xfe invalid utf-8 \xc3"}})});
  EXPECT_NO_THROW(render_chat(Template::parse("{{ messages[0].content[::-1] | upper | length }}"), inputs));
}

}  // namespace
}  // namespace deltaserve::jinja
