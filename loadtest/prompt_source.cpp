#include "loadtest/prompt_source.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace deltaserve::loadtest {

const std::vector<std::string>& prompt_words() {
  static const std::vector<std::string> words = {
      "the", "river", "carried", "small", "boats", "past", "old", "houses", "while", "children",
      "watched", "from", "a", "bridge", "and", "counted", "them", "one", "by", "morning",
      "light", "fell", "on", "green", "fields", "where", "farmers", "worked", "with", "quiet",
      "care", "birds", "sang", "in", "tall", "trees", "near", "stone", "walls", "that",
      "had", "stood", "for", "many", "years", "people", "walked", "to", "market", "selling",
      "bread", "fruit", "cheese", "under", "bright", "sky", "story", "of", "town", "grew",
      "every", "day", "as", "new"};
  return words;
}

PromptSource::PromptSource(const LoadOptions& options, std::string model)
    : options_(options), model_(std::move(model)) {
  if (options.prompts_path.empty()) return;
  std::ifstream in(options.prompts_path);
  if (!in) throw std::runtime_error(options.prompts_path + ": cannot open");
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = options.prompts_path + ":" + std::to_string(line_number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw std::runtime_error(where + ": not a JSON object");
    Prompt p;
    if (j.contains("messages") && j["messages"].is_array()) {
      p.messages = j["messages"];
      for (const auto& m : p.messages) {
        if (m.is_object() && m.contains("content") && m["content"].is_string()) {
          p.text += m["content"].get<std::string>() + "\n";
        }
      }
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      p.text = j["prompt"].get<std::string>();
    } else {
      throw std::runtime_error(where + ": needs a string \"prompt\" or an array \"messages\"");
    }
    if (j.contains("max_tokens") && j["max_tokens"].is_number_integer()) {
      p.max_tokens = std::max(1, j["max_tokens"].get<int32_t>());
    }
    file_prompts_.push_back(std::move(p));
  }
  if (file_prompts_.empty()) throw std::runtime_error(options.prompts_path + ": no prompts");
}

void PromptSource::set_tokens_per_word(double tokens_per_word) {
  if (tokens_per_word > 0.1 && tokens_per_word < 20.0) tokens_per_word_ = tokens_per_word;
}

std::string PromptSource::generated_text(int64_t index, int32_t num_tokens,
                                         std::mt19937_64& rng) const {
  const auto& words = prompt_words();
  std::string text = "Request " + std::to_string(index) + ":";
  const int64_t num_words =
      std::max<int64_t>(1, std::llround(std::max(1, num_tokens - 4) / tokens_per_word_));
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  for (int64_t i = 0; i < num_words; ++i) text += " " + words[pick(rng)];
  return text;
}

Prompt PromptSource::prompt(int64_t index, std::mt19937_64& rng) const {
  if (!file_prompts_.empty()) return file_prompts_[static_cast<size_t>(index) % file_prompts_.size()];
  Prompt p;
  p.text = generated_text(index, options_.input_tokens, rng);
  if (options_.workload == Workload::SharedPrefix) {
    // The same text for every request (its own generator, seeded by the run's seed).
    std::mt19937_64 shared_rng(options_.seed);
    p.text = generated_text(0, options_.shared_prefix_tokens, shared_rng) + "\n" + p.text;
  }
  return p;
}

nlohmann::json PromptSource::common_fields(const Prompt& p, int64_t index, bool stream) const {
  nlohmann::json body = {{"model", model_},
                         {"max_tokens", p.max_tokens > 0 ? p.max_tokens : options_.output_tokens},
                         {"temperature", options_.temperature},
                         {"seed", static_cast<int64_t>(options_.seed * 1000003ULL + static_cast<uint64_t>(index))},
                         {"stream", stream}};
  if (options_.ignore_eos) body["ignore_eos"] = true;
  if (options_.top_p < 1.0) body["top_p"] = options_.top_p;
  if (stream) {
    body["stream_options"] = {{"include_usage", true}};
    if (options_.continuous_usage) body["stream_options"]["continuous_usage_stats"] = true;
  }
  return body;
}

RequestPlan PromptSource::chat_plan(const Prompt& p, int64_t index, bool stream) const {
  nlohmann::json body = common_fields(p, index, stream);
  body["messages"] = p.messages.is_array()
                         ? p.messages
                         : nlohmann::json::array({{{"role", "user"}, {"content", p.text}}});
  RequestPlan plan;
  plan.kind = stream ? RequestKind::ChatStream : RequestKind::NonStream;
  plan.variant = "chat";
  plan.path = "/v1/chat/completions";
  plan.body = body.dump();
  plan.stream = stream;
  return plan;
}

RequestPlan PromptSource::completion_plan(const Prompt& p, int64_t index, bool stream) const {
  nlohmann::json body = common_fields(p, index, stream);
  if (p.token_ids.empty()) body["prompt"] = p.text;
  else body["prompt"] = p.token_ids;
  if (p.return_token_ids) body["return_token_ids"] = true;
  RequestPlan plan;
  plan.kind = stream ? RequestKind::CompletionStream : RequestKind::NonStream;
  plan.variant = "completion";
  plan.path = "/v1/completions";
  plan.body = body.dump();
  plan.stream = stream;
  return plan;
}

RequestPlan PromptSource::normal_plan(int64_t index, std::mt19937_64& rng, bool stream) const {
  const Prompt p = prompt(index, rng);
  const bool chat = options_.endpoint == EndpointChoice::Chat ||
                    (options_.endpoint == EndpointChoice::Mixed && index % 2 == 0);
  return chat ? chat_plan(p, index, stream) : completion_plan(p, index, stream);
}

}  // namespace deltaserve::loadtest
