// LoadDriver, the multi-turn workload (load_options.h Workload::MultiTurn): each client holds
// one conversation; every turn resends the whole history plus a new user message. The report
// adds TTFT and cached prompt tokens per turn, and how much of what an ideal prefix cache could
// reuse (the previous turn's prompt and answer) the server reported as cached.
//
// Two forms of the history. Chat (--endpoint chat): user messages and the model's answers as
// text, rendered by the server's chat template; an answer whose text tokenises differently
// from the ids the model produced (common with synthetic weights) diverges from the cached
// tokens inside it. Completions (--endpoint completions): the history as token ids, the
// previous prompt's and answer's ids as the server reported them (return_token_ids) and the new
// message tokenised by the server's /tokenize: what an agent that keeps token ids sends, and
// the form in which everything before the new message is reusable.
#include <algorithm>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "loadtest/load_driver.h"
#include "loadtest/server_probe.h"

namespace deltaserve::loadtest {

net::awaitable<void> LoadDriver::conversation_client(int32_t client, WaitGroup& clients) {
  if (options_.endpoint == EndpointChoice::Completions) {
    co_await token_conversation_client(client, clients);
    co_return;
  }
  nlohmann::json messages = nlohmann::json::array();
  for (int32_t turn = 0; turn < options_.turns && !stopping_; ++turn) {
    const int64_t index = next_index_++;
    messages.push_back({{"role", "user"},
                        {"content", "Conversation " + std::to_string(client) + ", turn " + std::to_string(turn) + ": " +
                                        prompts_->generated_text(index, options_.input_tokens, rng_)}});
    Prompt p;
    p.messages = messages;
    Answer answer;
    co_await one_request(prompts_->chat_plan(p, index, /*stream=*/true), false, nullptr, turn, &answer);
    messages.push_back({{"role", "assistant"}, {"content", answer.text}});
  }
  clients.done();
}

net::awaitable<void> LoadDriver::token_conversation_client(int32_t client, WaitGroup& clients) {
  std::vector<int32_t> history;  // the previous turn's prompt and answer ids
  for (int32_t turn = 0; turn < options_.turns && !stopping_; ++turn) {
    const int64_t index = next_index_++;
    const std::string text = (turn == 0 ? "" : "\n") + std::string("Conversation ") + std::to_string(client) + ", turn " +
                             std::to_string(turn) + ": " + prompts_->generated_text(index, options_.input_tokens, rng_);
    std::string body = nlohmann::json{{"prompt", text}, {"add_special_tokens", turn == 0}}.dump();
    const HttpCallResult tok = co_await http_call(url_, "POST", "/tokenize", std::move(body), options_.api_key,
                                                  std::chrono::seconds(30));
    const nlohmann::json ids = nlohmann::json::parse(tok.body, nullptr, false);
    if (tok.status != 200 || !ids.is_object() || !ids.contains("tokens") || !ids["tokens"].is_array()) {
      report_.notes.push_back("multi-turn: /tokenize failed (status " + std::to_string(tok.status) + "): conversation " +
                              std::to_string(client) + " stopped");
      break;
    }
    Prompt p;
    p.token_ids = history;
    for (const nlohmann::json& id : ids["tokens"]) p.token_ids.push_back(id.get<int32_t>());
    p.return_token_ids = true;
    RequestPlan plan = prompts_->completion_plan(p, index, /*stream=*/true);
    plan.reusable_prompt_tokens = static_cast<int64_t>(history.size());
    Answer answer;
    co_await one_request(std::move(plan), false, nullptr, turn, &answer);
    if (!answer.ok || answer.prompt_token_ids.empty()) break;  // counted as failed (or nothing to resend)
    history = std::move(answer.prompt_token_ids);
    history.insert(history.end(), answer.output_token_ids.begin(), answer.output_token_ids.end());
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
  int64_t total_prompt = 0, total_cached = 0, reusable = 0, reusable_cached = 0;
  for (const RequestResult& r : results_) {
    if (r.warmup || !r.failure.empty()) continue;
    if (r.reusable_prompt_tokens > 0) {  // token conversations, turns 2 on
      reusable += r.reusable_prompt_tokens;
      reusable_cached += std::min(r.cached_tokens, r.reusable_prompt_tokens);
    }
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
  // Token conversations know what an ideal cache reuses exactly: the resent ids.
  if (reusable > 0) {
    report_.reusable_prompt_tokens = reusable;
    report_.reusable_cached_tokens = reusable_cached;
    std::snprintf(line, sizeof line,
                  "prefix cache: %lld of %lld reusable prompt tokens reported cached (%.1f%%; reusable: the earlier turns' "
                  "prompts and answers, resent as ids)",
                  static_cast<long long>(reusable_cached), static_cast<long long>(reusable),
                  100.0 * static_cast<double>(reusable_cached) / static_cast<double>(reusable));
    report_.notes.push_back(line);
  }
}

}  // namespace deltaserve::loadtest
