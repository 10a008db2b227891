// LoadDriver, the multi-turn workload (load_options.h Workload::MultiTurn): each client holds
// one conversation; every turn resends the whole history (user messages and the model's
// answers, rendered by the server's chat template) plus a new user message. The report adds
// TTFT and cached prompt tokens per turn, and how much of what an ideal prefix cache could
// reuse (the previous turn's prompt and answer) the server reported as cached.
#include <algorithm>
#include <cstdio>
#include <map>

#include "loadtest/load_driver.h"

namespace deltaserve::loadtest {

net::awaitable<void> LoadDriver::conversation_client(int32_t client, WaitGroup& clients) {
  nlohmann::json messages = nlohmann::json::array();
  for (int32_t turn = 0; turn < options_.turns && !stopping_; ++turn) {
    const int64_t index = next_index_++;
    messages.push_back({{"role", "user"},
                        {"content", "Conversation " + std::to_string(client) + ", turn " + std::to_string(turn) + ": " +
                                        prompts_->generated_text(index, options_.input_tokens, rng_)}});
    Prompt p;
    p.messages = messages;
    std::string answer;
    co_await one_request(prompts_->chat_plan(p, index, /*stream=*/true), false, nullptr, turn, &answer);
    messages.push_back({{"role", "assistant"}, {"content", answer}});
  }
  clients.done();
}

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

void LoadDriver::add_turn_report() {
  if (options_.workload == Workload::Plain) return;
  struct Turn {
    std::vector<double> ttft_ms;
    int64_t prompt_tokens = 0, cached_tokens = 0;
  };
  std::map<int32_t, Turn> turns;
  int64_t total_prompt = 0, total_cached = 0;
  for (const RequestResult& r : results_) {
    if (r.warmup || !r.failure.empty()) continue;
    Turn& t = turns[std::max(0, r.turn)];
    if (r.ttft_ms >= 0.0) t.ttft_ms.push_back(r.ttft_ms);
    t.prompt_tokens += r.prompt_tokens;
    t.cached_tokens += r.cached_tokens;
    total_prompt += r.prompt_tokens;
    total_cached += r.cached_tokens;
  }
  char line[256];
  for (const auto& [turn, t] : turns) {
    if (options_.workload != Workload::MultiTurn) break;
    std::snprintf(line, sizeof line, "turn %d: %zu requests, TTFT p50 %.1f ms, p90 %.1f ms; cached %lld of %lld prompt tokens (%.1f%%)",
                  turn + 1, t.ttft_ms.size(), percentile(t.ttft_ms, 0.5), percentile(t.ttft_ms, 0.9),
                  static_cast<long long>(t.cached_tokens), static_cast<long long>(t.prompt_tokens),
                  t.prompt_tokens > 0 ? 100.0 * static_cast<double>(t.cached_tokens) / static_cast<double>(t.prompt_tokens) : 0.0);
    report_.notes.push_back(line);
  }
  // An ideal cache reuses, from turn 2 on, the previous turn's whole prompt and answer: about
  // the turn's prompt less its new user message and the template's few tokens around it.
  std::snprintf(line, sizeof line, "prefix cache: %lld of %lld prompt tokens reported cached (%.1f%%)",
                static_cast<long long>(total_cached), static_cast<long long>(total_prompt),
                total_prompt > 0 ? 100.0 * static_cast<double>(total_cached) / static_cast<double>(total_prompt) : 0.0);
  report_.notes.push_back(line);
}

}  // namespace deltaserve::loadtest
