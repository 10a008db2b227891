#include "loadtest/soak_mix.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace deltaserve::loadtest {
namespace {

using nlohmann::json;

// Default weights (percent of the main phase).
constexpr std::pair<RequestKind, double> kDefaultWeights[] = {
    {RequestKind::ChatStream, 28},       {RequestKind::CompletionStream, 12},
    {RequestKind::NonStream, 6},         {RequestKind::SlowReader, 3},
    {RequestKind::CancelBeforeToken, 6}, {RequestKind::CancelMidStream, 7},
    {RequestKind::CancelAtStep, 6},      {RequestKind::InvalidJson, 5},
    {RequestKind::InvalidUtf8, 5},       {RequestKind::OversizeBody, 3},
    {RequestKind::AbsurdParams, 8},      {RequestKind::MissingParams, 4},
    {RequestKind::OverContext, 4},       {RequestKind::BadHttp, 3},
};

template <class T>
const T& choose(const std::vector<T>& items, std::mt19937_64& rng) {
  return items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng)];
}

RequestPlan status_plan(RequestKind kind, std::string variant, std::string path, std::string body,
                        std::vector<unsigned> statuses) {
  RequestPlan plan;
  plan.kind = kind;
  plan.variant = std::move(variant);
  plan.path = std::move(path);
  plan.body = std::move(body);
  plan.expect = Expect::Status;
  plan.expected_statuses = std::move(statuses);
  return plan;
}

// A TLS-looking request line with a NUL in it.
constexpr char kGarbageLine[] = "\x16\x03\x01\x02\x00 garbage\r\n\r\n";

json user_messages(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

}  // namespace

std::vector<std::pair<RequestKind, double>> parse_mix_weights(const std::string& spec_text) {
  std::vector<std::pair<RequestKind, double>> weights(std::begin(kDefaultWeights), std::end(kDefaultWeights));
  std::stringstream spec(spec_text);
  std::string item;
  while (std::getline(spec, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    RequestKind kind;
    if (eq == std::string::npos || !parse_request_kind(item.substr(0, eq), kind) ||
        kind == RequestKind::Burst) {
      throw std::invalid_argument("--mix: '" + item + "' is not kind=weight with a soak kind");
    }
    double weight = 0.0;
    try {
      weight = std::stod(item.substr(eq + 1));
    } catch (const std::exception&) {
      weight = -1.0;
    }
    if (!(weight >= 0.0)) throw std::invalid_argument("--mix: bad weight in '" + item + "'");
    auto it = std::find_if(weights.begin(), weights.end(), [&](auto& w) { return w.first == kind; });
    it->second = weight;
  }
  if (std::all_of(weights.begin(), weights.end(), [](auto& w) { return w.second <= 0.0; })) {
    throw std::invalid_argument("--mix: every weight is 0");
  }
  return weights;
}

SoakMix::SoakMix(const LoadOptions& options, const PromptSource& prompts, const ServerFacts& facts)
    : options_(options), prompts_(prompts), facts_(facts), weights_(parse_mix_weights(options.mix)) {
  std::vector<double> w;
  for (const auto& [kind, weight] : weights_) w.push_back(weight);
  distribution_ = std::discrete_distribution<int>(w.begin(), w.end());
}

std::string SoakMix::describe() const {
  double total = 0.0;
  for (const auto& [kind, weight] : weights_) total += weight;
  std::ostringstream out;
  for (const auto& [kind, weight] : weights_) {
    if (weight <= 0.0) continue;
    out << (out.tellp() > 0 ? " " : "") << request_kind_name(kind) << "="
        << static_cast<int>(100.0 * weight / total + 0.5) << "%";
  }
  return out.str();
}

RequestKind SoakMix::pick(std::mt19937_64& rng) const {
  auto d = distribution_;  // a copy: distributions keep state, and pick() is const
  return weights_[static_cast<size_t>(d(rng))].first;
}

int32_t SoakMix::short_max_tokens(std::mt19937_64& rng) const {
  const int32_t top = options_.output_tokens;
  return std::uniform_int_distribution<int32_t>(std::max(1, top / 2), top)(rng);
}

std::string SoakMix::raw_post(const std::string& path, const std::string& body) const {
  return "POST " + facts_.base_path + path + " HTTP/1.1\r\nHost: loadtest\r\n" +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

RequestPlan SoakMix::make(RequestKind kind, int64_t index, std::mt19937_64& rng) const {
  switch (kind) {
    case RequestKind::ChatStream:
    case RequestKind::CompletionStream:
    case RequestKind::NonStream:
    case RequestKind::SlowReader:
    case RequestKind::Burst: return normal(kind, index, rng);
    case RequestKind::CancelBeforeToken:
    case RequestKind::CancelMidStream:
    case RequestKind::CancelAtStep: return cancel(kind, index, rng);
    case RequestKind::InvalidJson: return invalid_json(rng);
    case RequestKind::InvalidUtf8: return invalid_utf8(rng);
    case RequestKind::OversizeBody: return oversize(rng);
    case RequestKind::AbsurdParams: return absurd(rng);
    case RequestKind::MissingParams: return missing(rng);
    case RequestKind::OverContext: return over_context(index, rng);
    case RequestKind::BadHttp: return bad_http(rng);
  }
  return normal(RequestKind::ChatStream, index, rng);
}

RequestPlan SoakMix::normal(RequestKind kind, int64_t index, std::mt19937_64& rng) const {
  Prompt p = prompts_.prompt(index, rng);
  p.max_tokens = short_max_tokens(rng);
  const bool stream = kind != RequestKind::NonStream;
  const bool chat = kind == RequestKind::ChatStream || kind == RequestKind::Burst ||
                    kind == RequestKind::SlowReader ||
                    (kind == RequestKind::NonStream && index % 2 == 0);
  RequestPlan plan = chat ? prompts_.chat_plan(p, index, stream) : prompts_.completion_plan(p, index, stream);
  plan.kind = kind;
  if (kind == RequestKind::SlowReader) {
    plan.slow = true;
    plan.fresh_connection = true;
  }
  if (kind == RequestKind::Burst) {
    plan.in_burst = true;
    plan.fresh_connection = true;
  }
  return plan;
}

RequestPlan SoakMix::cancel(RequestKind kind, int64_t index, std::mt19937_64& rng) const {
  Prompt p = prompts_.prompt(index, rng);
  p.max_tokens = std::max(4, 2 * options_.output_tokens);  // long enough to be cut
  const bool chat = index % 3 != 0;
  const bool stream = !(kind == RequestKind::CancelBeforeToken && index % 4 == 1);
  RequestPlan plan = chat ? prompts_.chat_plan(p, index, stream) : prompts_.completion_plan(p, index, stream);
  plan.kind = kind;
  plan.expect = Expect::ClientCancel;
  plan.fresh_connection = true;
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (kind == RequestKind::CancelBeforeToken) {
    if (!stream || uniform(0, 1) == 0) {
      plan.cancel_after_send = true;
      plan.variant = stream ? "close after send" : "non-stream close after send";
    } else {
      plan.cancel_after_chunks = 0;
      plan.variant = "close after the response header";
    }
  } else if (kind == RequestKind::CancelMidStream) {
    plan.cancel_after_chunks = uniform(1, std::max(1, p.max_tokens - 2));
    plan.variant = "close after k token chunks";
  } else {
    plan.cancel_on_multi_token = true;
    plan.cancel_after_chunks = uniform(2, std::max(2, p.max_tokens - 2));
    plan.variant = "close the instant a chunk lands";
  }
  return plan;
}

RequestPlan SoakMix::invalid_json(std::mt19937_64& rng) const {
  const std::string good = json{{"model", facts_.model}, {"messages", user_messages("hi")}}.dump();
  const size_t depth = static_cast<size_t>(std::min<int64_t>(5000, options_.server_max_body_bytes / 4));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated", good.substr(0, good.size() - 5)},
      {"trailing garbage", good + "}}garbage"},
      {"single quotes", "{'messages': [{'role': 'user', 'content': 'hi'}]}"},
      {"NaN literal", R"({"messages":[{"role":"user","content":"hi"}],"temperature":NaN})"},
      {"bare word", "hello"},
      {"empty body", ""},
      {"comment", R"({"messages":[{"role":"user","content":"hi"}] /* c */})"},
      {"deep unclosed nesting", std::string(depth, '[')},
      {"deep closed nesting", std::string(depth, '[') + std::string(depth, ']')},
      {"control char in string", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\x01z\"}]}"},
  };
  const auto& [variant, body] = choose(cases, rng);
  return status_plan(RequestKind::InvalidJson, variant, "/v1/chat/completions", body, {400});
}

RequestPlan SoakMix::invalid_utf8(std::mt19937_64& rng) const {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bad continuation", "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xC3\x28\"}]}"},
      {"overlong", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xC0\xAF\"}]}"},
      {"lone surrogate escape", R"({"messages":[{"role":"user","content":"x\ud800y"}]})"},
      {"truncated sequence", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xE2\x82\"}]}"},
      {"0xFF byte", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xFFz\"}]}"},
      {"in a key", "{\"messages\":[{\"ro\xE9le\":\"user\",\"content\":\"hi\"}]}"},
  };
  const auto& [variant, body] = choose(cases, rng);
  if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {  // the completions parser too
    return status_plan(RequestKind::InvalidUtf8, "completion prompt", "/v1/completions",
                       "{\"prompt\":\"caf\xC3\x28 \xFF\"}", {400});
  }
  return status_plan(RequestKind::InvalidUtf8, variant, "/v1/chat/completions", body, {400});
}

RequestPlan SoakMix::oversize(std::mt19937_64& rng) const {
  const int64_t limit = options_.server_max_body_bytes;
  const std::string path = facts_.base_path + "/v1/chat/completions";
  RequestPlan plan = status_plan(RequestKind::OversizeBody, "", "/v1/chat/completions", "", {413});
  plan.fresh_connection = true;
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0:  // the header alone says too much: answered before the body is read
      plan.variant = "Content-Length over the limit";
      plan.raw = "POST " + path + " HTTP/1.1\r\nHost: loadtest\r\nContent-Type: application/json\r\n"
                 "Content-Length: " + std::to_string(limit + 1) + "\r\n\r\n" + std::string(1024, ' ');
      break;
    case 1: {  // no length up front: the limit is hit while reading chunks
      plan.variant = "chunked body over the limit";
      const std::string chunk(static_cast<size_t>(limit / 4 + 1), ' ');
      char size_line[32];
      std::snprintf(size_line, sizeof(size_line), "%zx\r\n", chunk.size());
      plan.raw = "POST " + path + " HTTP/1.1\r\nHost: loadtest\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n";
      for (int i = 0; i < 5; ++i) plan.raw += size_line + chunk + "\r\n";
      plan.raw += "0\r\n\r\n";
      break;
    }
    default: {  // a real JSON document one byte over
      plan.variant = "JSON body one byte over the limit";
      std::string body = json{{"messages", user_messages("")}}.dump();
      const std::string head = body.substr(0, body.find("\"\"") + 1);
      const std::string tail = body.substr(head.size());
      const int64_t fill = std::max<int64_t>(0, limit + 1 - static_cast<int64_t>(body.size()));
      plan.raw = raw_post("/v1/chat/completions", head + std::string(static_cast<size_t>(fill), 'a') + tail);
      break;
    }
  }
  return plan;
}

RequestPlan SoakMix::absurd(std::mt19937_64& rng) const {
  const auto chat = [&](json extra) {
    json body = {{"model", facts_.model}, {"messages", user_messages("hi")}, {"max_tokens", 4}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body.dump();
  };
  json many_stops = json::array();
  for (int i = 0; i < 40; ++i) many_stops.push_back("s" + std::to_string(i));
  const std::string c = "/v1/chat/completions";
  const std::string p = "/v1/completions";
  const std::vector<std::tuple<std::string, std::string, std::string, unsigned>> cases = {
      {"temperature=9", c, chat({{"temperature", 9}}), 400},
      {"temperature=-1", c, chat({{"temperature", -1}}), 400},
      {"max_tokens=-5", c, chat({{"max_tokens", -5}}), 400},
      {"max_tokens=0", c, chat({{"max_tokens", 0}}), 400},
      {"max_tokens=\"ten\"", c, chat({{"max_tokens", "ten"}}), 400},
      {"max_tokens=3.5", c, chat({{"max_tokens", 3.5}}), 400},
      {"max_tokens=2^31", c, chat({{"max_tokens", int64_t{1} << 31}}), 400},
      {"max_tokens=1e999", c, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1e999})", 400},
      {"top_p=7", c, chat({{"top_p", 7}}), 400},
      {"top_k=-7", c, chat({{"top_k", -7}}), 400},
      {"n=5", c, chat({{"n", 5}}), 400},
      {"messages=\"hello\"", c, chat({{"messages", "hello"}}), 400},
      {"40 stop strings", c, chat({{"stop", many_stops}}), 400},
      {"logit_bias key abc", c, chat({{"logit_bias", {{"abc", 1}}}}), 400},
      {"logit_bias=1000", c, chat({{"logit_bias", {{"5", 1000}}}}), 400},
      {"unknown field", c, chat({{"frobnicate", true}}), 400},
      {"stream_options without stream", c, chat({{"stream_options", {{"include_usage", true}}}}), 400},
      {"seed=1.5", c, chat({{"seed", 1.5}}), 400},
      {"role=wizard", c, chat({{"messages", json::array({{{"role", "wizard"}, {"content", "hi"}}})}}), 400},
      {"model=no-such-model", c, chat({{"model", "no-such-model"}}), 404},
      {"top_logprobs=1000", c, chat({{"logprobs", true}, {"top_logprobs", 1000}}), 400},
      {"presence_penalty=\"high\"", c, chat({{"presence_penalty", "high"}}), 400},
      {"response_format json_schema", c, chat({{"response_format", {{"type", "json_schema"}}}}), 400},
      {"stop_token_ids=[-3]", c, chat({{"stop_token_ids", {-3}}}), 400},
      {"prompt=42", p, R"({"prompt":42,"max_tokens":4})", 400},
      {"prompt=[[-1,5]]", p, R"({"prompt":[[-1,5]],"max_tokens":4})", 400},
      {"echo=true", p, R"({"prompt":"hi","echo":true,"max_tokens":4})", 400},
      {"prompt token id 2^40", p, R"({"prompt":[1099511627776],"max_tokens":4})", 400},
  };
  const auto& [variant, path, body, status] = choose(cases, rng);
  return status_plan(RequestKind::AbsurdParams, variant, path, body, {status});
}

RequestPlan SoakMix::missing(std::mt19937_64& rng) const {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"chat {}", "/v1/chat/completions", "{}"},
      {"completions {}", "/v1/completions", "{}"},
      {"chat model only", "/v1/chat/completions", json{{"model", facts_.model}}.dump()},
      {"chat messages=null", "/v1/chat/completions", R"({"messages":null})"},
      {"completions prompt=null", "/v1/completions", R"({"prompt":null,"max_tokens":4})"},
      {"body null", "/v1/chat/completions", "null"},
      {"body []", "/v1/completions", "[]"},
      {"tokenize {}", "/tokenize", "{}"},
      {"detokenize {}", "/detokenize", "{}"},
  };
  const auto& [variant, path, body] = choose(cases, rng);
  return status_plan(RequestKind::MissingParams, variant, path, body, {400});
}

RequestPlan SoakMix::over_context(int64_t index, std::mt19937_64& rng) const {
  const int64_t ctx = facts_.context_tokens;
  if (ctx <= 0 || facts_.sample_token_ids.empty()) return absurd(rng);
  RequestPlan plan;
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0: {  // exact: token ids, the context plus a few
      json ids = json::array();
      const int64_t n = ctx + std::uniform_int_distribution<int64_t>(0, 64)(rng);
      for (int64_t i = 0; i < n; ++i) ids.push_back(choose(facts_.sample_token_ids, rng));
      plan = status_plan(RequestKind::OverContext, "token-id prompt over the context", "/v1/completions",
                         json{{"prompt", ids}, {"max_tokens", 4}}.dump(), {400});
      break;
    }
    case 1: {  // text well over the context through the chat template
      const std::string text = prompts_.generated_text(index, static_cast<int32_t>(ctx * 3 / 2), rng);
      plan = status_plan(RequestKind::OverContext, "chat text over the context", "/v1/chat/completions",
                         json{{"messages", user_messages(text)}, {"max_tokens", 4}}.dump(), {400});
      break;
    }
    default:  // a short prompt asking for more tokens than the context holds
      plan = status_plan(RequestKind::OverContext, "max_tokens over the context", "/v1/chat/completions",
                         json{{"messages", user_messages("hi")}, {"max_tokens", ctx}}.dump(), {400});
      break;
  }
  // A body past the size limit is answered 413 before anything else looks at it.
  if (static_cast<int64_t>(plan.body.size()) > options_.server_max_body_bytes) {
    plan.expected_statuses.push_back(413);
    plan.fresh_connection = true;
  }
  return plan;
}

RequestPlan SoakMix::bad_http(std::mt19937_64& rng) const {
  const std::string chat = facts_.base_path + "/v1/chat/completions";
  const std::vector<std::tuple<std::string, std::string, unsigned>> cases = {
      {"garbage request line", std::string(kGarbageLine, sizeof(kGarbageLine) - 1), 400},
      {"header without colon", "POST " + chat + " HTTP/1.1\r\nHost loadtest\r\n\r\n", 400},
      {"bad Content-Length", "POST " + chat + " HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n", 400},
      {"header over 64 KiB", "GET " + facts_.base_path + "/health HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                 std::string(70 * 1024, 'x') + "\r\n\r\n", 400},
      {"GET on a POST route", "GET " + chat + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405},
      {"unknown route", raw_post("/v1/nowhere", "{}"), 404},
  };
  const auto& [variant, raw, status] = choose(cases, rng);
  RequestPlan plan = status_plan(RequestKind::BadHttp, variant, "", "", {status});
  plan.raw = raw;
  plan.fresh_connection = true;
  return plan;
}

}  // namespace deltaserve::loadtest
