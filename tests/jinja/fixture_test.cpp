// Differential tests against jinja2: every case in tests/fixtures/chat_templates/*/cases.jsonl
// and tests/fixtures/jinja/expressions.jsonl was rendered by tools/chat_template_oracle/
// make_fixtures.py (jinja2 configured as transformers configures it). We must match byte for
// byte, or fail the same way. When DS_JINJA_REGENERATED_FIXTURES names a directory (CI runs
// regenerate_and_compare.sh), the freshly regenerated expectations are checked as well.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "server/jinja/chat_template.h"
#include "server/jinja/template.h"

namespace deltaserve::jinja {
namespace {

using Json = nlohmann::ordered_json;

// The clock make_fixtures.py gives strftime_now(): 2025-07-26 14:05:09, a Saturday.
std::tm fixed_local_time() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  tm.tm_wday = 6;
  tm.tm_yday = 206;
  return tm;
}

RenderOptions fixture_options() {
  RenderOptions options;
  options.local_time = fixed_local_time;
  return options;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> rows;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

// The fixture roots to check: the committed one, plus the regenerated one when CI gives it.
std::vector<std::string> fixture_roots() {
  std::vector<std::string> roots = {"tests/fixtures"};
  if (const char* regenerated = std::getenv("DS_JINJA_REGENERATED_FIXTURES")) {
    if (*regenerated != '\0') roots.emplace_back(regenerated);
  }
  return roots;
}

std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  want: " +
         Json(want.substr(from, 120)).dump() + "\n  got:  " + Json(got.substr(from, 120)).dump();
}

// Renders via `render` and compares with a case's "expected" or "error".
template <typename RenderFn>
void check_case(const Json& c, const std::string& label, RenderFn&& render) {
  std::string got;
  try {
    got = render();
  } catch (const TemplateError& e) {
    if (!c.contains("error")) {
      ADD_FAILURE() << label << ": unexpected error: " << e.what();
    } else if (c.at("error_kind") == "raise_exception") {
      EXPECT_EQ(e.message(), c.at("error").get<std::string>()) << label;
    }
    return;
  }
  if (c.contains("error")) {
    ADD_FAILURE() << label << ": jinja2 failed (" << c.at("error").get<std::string>()
                  << ") but we rendered " << Json(got).dump();
    return;
  }
  const std::string want = c.at("expected").get<std::string>();
  if (got != want) ADD_FAILURE() << label << ": " << first_difference(want, got);
}

class ChatTemplateFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixtures, MatchesTransformersByteForByte) {
  const std::string name = GetParam();
  for (const std::string& root : fixture_roots()) {
    const Json manifest = Json::parse(read_file(root + "/chat_templates/manifest.json"));
    const Json& entry = manifest.at("templates").at(name);
    // Template sources always come from the repository, whichever root the cases come from.
    std::string source = read_file(entry.at("source").get<std::string>());
    if (!entry.at("key").is_null()) source = Json::parse(source).at(entry.at("key").get<std::string>());
    const Template tmpl = Template::parse(source);
    const std::vector<Json> cases = read_jsonl(root + "/chat_templates/" + name + "/cases.jsonl");
    ASSERT_GE(cases.size(), 30u) << root;
    for (const Json& c : cases) {
      ChatTemplateInputs inputs;
      inputs.messages = c.at("messages");
      inputs.tools = c.at("tools");
      inputs.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
      inputs.extra_kwargs = c.at("kwargs");
      if (!entry.at("bos_token").is_null()) inputs.bos_token = entry.at("bos_token").get<std::string>();
      if (!entry.at("eos_token").is_null()) inputs.eos_token = entry.at("eos_token").get<std::string>();
      check_case(c, root + " " + name + "/" + c.at("name").get<std::string>(),
                 [&] { return render_chat(tmpl, inputs, fixture_options()); });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateFixtures,
                         ::testing::Values("qwen3", "qwen3_5", "chatml", "llama3_style",
                                           "mistral_style", "kitchen_sink"));

TEST(ExpressionFixtures, MatchJinja2) {
  for (const std::string& root : fixture_roots()) {
    const std::vector<Json> cases = read_jsonl(root + "/jinja/expressions.jsonl");
    ASSERT_GE(cases.size(), 50u);
    for (const Json& c : cases) {
      const std::string source = c.at("template").get<std::string>();
      check_case(c, root + " " + Json(source).dump(),
                 [&] { return Template::parse(source).render(c.at("context"), fixture_options()); });
    }
  }
}

}  // namespace
}  // namespace deltaserve::jinja
