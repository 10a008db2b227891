// The soak's request mix: which kind the next request is (weighted, seeded) and the plan
// for it, one variant per abuse case: disconnects at three points, slow readers, invalid
// JSON and UTF-8, oversize bodies, absurd or missing parameters, prompts over the context
// and malformed HTTP. Bursts over the queue limit are fired by the driver (LoadDriver).
// Every plan states what the server must answer (Expect + statuses). Plain value; one thread.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loadtest/load_options.h"
#include "loadtest/prompt_source.h"
#include "loadtest/request_plan.h"

namespace deltaserve::loadtest {

// What the tool learnt about the server before the run (/v1/models, /metrics, /tokenize).
struct ServerFacts {
  std::string model;
  std::string base_path;           // the URL's path prefix ("" for most servers)
  int64_t context_tokens = 0;      // max_model_len; 0 = unknown
  int64_t num_state_slots = 0;     // deltaserve_state_slots_total; 0 = unknown
  std::vector<int32_t> sample_token_ids;  // valid ids (from /tokenize of the word list)
};

// The default weights with "kind=weight,..." applied; throws std::invalid_argument.
std::vector<std::pair<RequestKind, double>> parse_mix_weights(const std::string& spec);

class SoakMix {
 public:
  // Throws std::invalid_argument on a bad --mix string (parse_mix_weights).
  SoakMix(const LoadOptions& options, const PromptSource& prompts, const ServerFacts& facts);

  RequestKind pick(std::mt19937_64& rng) const;
  RequestPlan make(RequestKind kind, int64_t index, std::mt19937_64& rng) const;

  // "chat_stream=28% completion_stream=12% ..." (kinds with weight 0 left out).
  std::string describe() const;
  const std::vector<std::pair<RequestKind, double>>& weights() const { return weights_; }

 private:
  RequestPlan normal(RequestKind kind, int64_t index, std::mt19937_64& rng) const;
  RequestPlan cancel(RequestKind kind, int64_t index, std::mt19937_64& rng) const;
  RequestPlan invalid_json(std::mt19937_64& rng) const;
  RequestPlan invalid_utf8(std::mt19937_64& rng) const;
  RequestPlan oversize(std::mt19937_64& rng) const;
  RequestPlan absurd(std::mt19937_64& rng) const;
  RequestPlan missing(std::mt19937_64& rng) const;
  RequestPlan over_context(int64_t index, std::mt19937_64& rng) const;
  RequestPlan bad_http(std::mt19937_64& rng) const;
  std::string raw_post(const std::string& path, const std::string& body) const;
  int32_t short_max_tokens(std::mt19937_64& rng) const;

  const LoadOptions& options_;
  const PromptSource& prompts_;
  ServerFacts facts_;
  std::vector<std::pair<RequestKind, double>> weights_;
  std::discrete_distribution<int> distribution_;
};

}  // namespace deltaserve::loadtest
