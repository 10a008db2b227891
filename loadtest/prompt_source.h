// Prompts for well-formed requests: lines of a JSONL file, used in turn, or text generated
// to about a given number of tokens (words drawn from a fixed list with a seeded generator;
// tokens per word measured once through the server's /tokenize, since the tool has no
// tokenizer). Builds the request bodies: streaming with include_usage (and, by default,
// continuous usage, so every chunk says how many tokens it carries).
// Plain value; one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadtest/load_options.h"
#include "loadtest/request_plan.h"

namespace deltaserve::loadtest {

struct Prompt {
  std::string text;                 // for completions (and chat when messages is null)
  nlohmann::json messages;          // null: a single user message with `text`
  std::vector<int32_t> token_ids;   // completions: non-empty, the prompt as ids instead of text
  bool return_token_ids = false;    // ask for the prompt's and the output's ids (vLLM's field)
  int32_t max_tokens = 0;           // 0: the run's --output-tokens
};

class PromptSource {
 public:
  // Throws std::runtime_error naming the file and line on an unreadable JSONL file.
  PromptSource(const LoadOptions& options, std::string model);

  // Set once from /tokenize (default 1.3); only generated prompts use it.
  void set_tokens_per_word(double tokens_per_word);
  double tokens_per_word() const { return tokens_per_word_; }

  // Text of about `num_tokens` tokens (generated; the request number keeps prompts distinct).
  std::string generated_text(int64_t index, int32_t num_tokens, std::mt19937_64& rng) const;

  Prompt prompt(int64_t index, std::mt19937_64& rng) const;

  // A well-formed request of the run's endpoint choice (mixed: alternating by index).
  RequestPlan normal_plan(int64_t index, std::mt19937_64& rng, bool stream) const;
  RequestPlan chat_plan(const Prompt& p, int64_t index, bool stream) const;
  RequestPlan completion_plan(const Prompt& p, int64_t index, bool stream) const;

  // Body fields every generation request carries (model, max_tokens, sampling, stream...).
  nlohmann::json common_fields(const Prompt& p, int64_t index, bool stream) const;
  const std::string& model() const { return model_; }

 private:
  const LoadOptions& options_;
  std::string model_;
  std::vector<Prompt> file_prompts_;
  double tokens_per_word_ = 1.3;
};

// Words of the generated prompts (also used to measure tokens per word).
const std::vector<std::string>& prompt_words();

}  // namespace deltaserve::loadtest
