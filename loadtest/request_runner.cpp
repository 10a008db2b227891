#include "loadtest/request_runner.h"

#include <algorithm>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "loadtest/json_read.h"
#include "loadtest/sse_parser.h"

namespace deltaserve::loadtest {
namespace {

using nlohmann::json;

constexpr size_t kFullBodyLimitBytes = 64 << 20;
constexpr size_t kSlowReadBytes = 256;
constexpr auto kSlowReadPause = std::chrono::milliseconds(20);

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Where one request stands while it runs.
struct Exchange {
  const RunnerContext& context;
  const RequestPlan& plan;
  RequestResult& result;
  Clock::time_point start;
  Clock::time_point deadline;  // the whole request

  Clock::time_point io_deadline() const {
    return std::min(deadline, Clock::now() + seconds(context.options->idle_timeout_s));
  }
};

void read_error_body(const json& body, RequestResult& r) {
  if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) return;
  const json& e = body["error"];
  r.error_type = json_string(e, "type", "unknown");
  r.error_code = json_string(e, "code");
  if (r.error_type.empty()) r.error_type = "unknown";
}

void read_usage(const json& chunk, RequestResult& r) {
  const auto it = chunk.find("usage");
  if (it == chunk.end() || !it->is_object()) return;
  r.has_usage = true;
  r.prompt_tokens = json_int(*it, "prompt_tokens");
  r.completion_tokens = json_int(*it, "completion_tokens");
  if (const auto details = it->find("prompt_tokens_details"); details != it->end() && details->is_object())
    r.cached_tokens = json_int(*details, "cached_tokens");
}

// Appends the ids of a json array of token ids to `out` (nothing when absent or malformed).
void append_ids(const json& obj, const char* key, std::vector<int32_t>& out) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) return;
  for (const json& id : *it) {
    if (id.is_number_integer()) out.push_back(id.get<int32_t>());
  }
}

// return_token_ids (chunks and bodies): the output's ids of the choice, and the prompt's,
// which chat puts at the top and completions in the choice.
void read_token_ids(const json& top, const json& choice, RequestResult& r) {
  append_ids(choice, "token_ids", r.output_token_ids);
  append_ids(top, "prompt_token_ids", r.prompt_token_ids);
  append_ids(choice, "prompt_token_ids", r.prompt_token_ids);
}

// Appends the choice's answer text (chat delta.content or message.content, completion text)
// to r.content.
void read_content(const json& choice, RequestResult& r) {
  if (const auto text = choice.find("text"); text != choice.end() && text->is_string()) r.content += text->get<std::string>();
  auto delta = choice.find("delta");
  if (delta == choice.end()) delta = choice.find("message");
  if (delta == choice.end() || !delta->is_object()) return;
  if (const auto content = delta->find("content"); content != delta->end() && content->is_string())
    r.content += content->get<std::string>();
}

// Token-carrying state of a stream.
struct StreamTiming {
  int64_t tokens_seen = 0;  // running completion_tokens of the previous chunk
  int num_token_chunks = 0;
  Clock::time_point first_token;
  Clock::time_point last_token;
};

bool chunk_has_text(const json& choice) {
  const auto nonempty = [](const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it != obj.end() && ((it->is_string() && !it->get<std::string>().empty()) ||
                               (it->is_array() && !it->empty()));
  };
  if (nonempty(choice, "text")) return true;
  const auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return false;
  return nonempty(*delta, "content") || nonempty(*delta, "reasoning_content") ||
         nonempty(*delta, "reasoning") || nonempty(*delta, "tool_calls");
}

// Handles one SSE event; returns true when the plan says to hang up now.
bool on_event(Exchange& x, StreamTiming& t, const std::string& data) {
  RequestResult& r = x.result;
  if (data == "[DONE]") {
    r.done_marker = true;
    return false;
  }
  const json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded()) {
    r.transport_error = "malformed_chunk not JSON";
    return false;
  }
  read_error_body(chunk, r);
  bool has_text = false;
  if (const auto choices = chunk.find("choices"); choices != chunk.end() && choices->is_array() &&
                                                  !choices->empty()) {
    const json& choice = (*choices)[0];
    if (const auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
      r.finish_reason = f->get<std::string>();
      ++r.num_finish_reasons;
    }
    has_text = chunk_has_text(choice);
    read_content(choice, r);
    read_token_ids(chunk, choice, r);
  }
  read_usage(chunk, r);
  int64_t num_tokens = 0;
  if (x.context.options->continuous_usage) {
    num_tokens = std::max<int64_t>(0, r.completion_tokens - t.tokens_seen);
    t.tokens_seen = std::max(t.tokens_seen, r.completion_tokens);
  } else if (has_text) {
    num_tokens = 1;  // timing only: counts come from the final usage
  }
  if (num_tokens == 0) return false;
  const Clock::time_point now = Clock::now();
  if (t.num_token_chunks == 0) {
    t.first_token = now;
    r.ttft_ms = ms_between(x.start, now);
  } else if (x.context.options->continuous_usage) {
    const double gap_ms = ms_between(t.last_token, now) / static_cast<double>(num_tokens);
    r.itl_ms.insert(r.itl_ms.end(), static_cast<size_t>(num_tokens), gap_ms);
  }
  t.last_token = now;
  ++t.num_token_chunks;
  if (num_tokens >= 2 && x.context.options->continuous_usage) ++r.num_multi_token_chunks;
  if (x.context.on_tokens && x.context.options->continuous_usage) x.context.on_tokens(now, num_tokens);
  if (x.plan.cancel_on_multi_token && num_tokens >= 2) return true;
  return x.plan.cancel_after_chunks > 0 && t.num_token_chunks >= x.plan.cancel_after_chunks;
}

void finish_timing(Exchange& x, const StreamTiming& t) {
  RequestResult& r = x.result;
  if (t.num_token_chunks == 0 || r.completion_tokens < 2) return;
  const double span_ms = ms_between(t.first_token, t.last_token);
  if (span_ms > 0.0) r.decode_tokens_per_s = 1000.0 * static_cast<double>(r.completion_tokens - 1) / span_ms;
  if (!x.context.options->continuous_usage && !r.cancelled) {
    const double per_token = span_ms / static_cast<double>(r.completion_tokens - 1);
    r.itl_ms.assign(static_cast<size_t>(r.completion_tokens - 1), per_token);
    if (x.context.on_tokens) x.context.on_tokens(Clock::now(), r.completion_tokens);
  }
}

net::awaitable<void> read_stream(Exchange& x, HttpConnection& c) {
  RequestResult& r = x.result;
  SseParser sse;
  StreamTiming timing;
  std::vector<std::string> events;
  net::steady_timer pause(co_await net::this_coro::executor);
  while (true) {
    std::string bytes;
    const BodyRead read = co_await c.read_body_some(bytes, x.plan.slow ? kSlowReadBytes : 16 * 1024,
                                                    x.io_deadline());
    events.clear();
    if (!sse.feed(bytes, events)) {
      r.transport_error = "sse_line_too_long";
      c.close();
      break;
    }
    bool hang_up = false;
    for (const std::string& e : events) hang_up = on_event(x, timing, e) || hang_up;
    if (hang_up) {
      c.close();
      r.cancelled = true;
      break;
    }
    if (read.ec) {
      r.transport_error = describe_error(read.ec) + " in the stream";
      break;
    }
    if (read.done) break;
    if (x.plan.slow) {
      pause.expires_after(kSlowReadPause);
      beast::error_code ignored;
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ignored));
    }
  }
  if (!r.cancelled && r.transport_error.empty() && sse.num_pending_bytes() > 0) {
    r.transport_error = "truncated_event at the end of the body";
  }
  finish_timing(x, timing);
}

net::awaitable<void> read_full(Exchange& x, HttpConnection& c) {
  RequestResult& r = x.result;
  std::string body;
  const beast::error_code ec = co_await c.read_body_all(body, kFullBodyLimitBytes, x.io_deadline());
  if (ec) {
    r.transport_error = describe_error(ec) + " reading the body";
    co_return;
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (r.status != 200) {
    read_error_body(j, r);
    co_return;
  }
  if (j.is_discarded()) {
    r.transport_error = "malformed_body not JSON";
    co_return;
  }
  if (const auto choices = j.find("choices"); choices != j.end() && choices->is_array() && !choices->empty()) {
    if (const auto f = (*choices)[0].find("finish_reason"); f != (*choices)[0].end() && f->is_string()) {
      r.finish_reason = f->get<std::string>();
      r.num_finish_reasons = 1;
    }
    read_content((*choices)[0], r);
    read_token_ids(j, (*choices)[0], r);
  }
  read_usage(j, r);
  if (x.context.on_tokens && r.completion_tokens > 0) x.context.on_tokens(Clock::now(), r.completion_tokens);
}

// Sends the plan on `c` and reads the answer. Returns false when nothing at all came back
// on a reused connection (the server may have closed it idle): the caller retries once.
net::awaitable<bool> exchange_on(Exchange& x, HttpConnection& c, bool reused) {
  const RequestPlan& plan = x.plan;
  RequestResult& r = x.result;
  const ServerUrl& url = x.context.pool->url();
  const std::string bytes = !plan.raw.empty()
                                ? plan.raw
                                : build_request(plan.method, url.base_path + plan.path, url.host, plan.body,
                                                x.context.options->api_key, !plan.fresh_connection);
  const beast::error_code write_ec = co_await c.write(bytes, x.io_deadline());
  if (write_ec && plan.kind != RequestKind::OversizeBody) {
    c.close();
    if (reused) co_return false;
    r.transport_error = describe_error(write_ec) + " writing the request";
    co_return true;
  }
  if (plan.cancel_after_send) {
    c.close();
    r.cancelled = true;
    co_return true;
  }
  const beast::error_code ec = co_await c.read_header(x.io_deadline());
  if (ec) {
    if (reused && (ec == http::error::end_of_stream || ec == net::error::connection_reset ||
                   ec == net::error::eof)) {
      co_return false;
    }
    r.transport_error = describe_error(ec) + " reading the header";
    co_return true;
  }
  r.status = c.status();
  if (plan.stream && r.status == 200 && plan.cancel_after_chunks == 0) {
    c.close();
    r.cancelled = true;
  } else if (plan.stream && r.status == 200) {
    co_await read_stream(x, c);
  } else {
    co_await read_full(x, c);
  }
  co_return true;
}

}  // namespace

std::string describe_error(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timeout";
  if (ec == net::error::eof || ec == http::error::end_of_stream) return "eof";
  if (ec == http::error::partial_message) return "eof mid-message";
  if (ec == net::error::connection_reset) return "reset";
  if (ec == net::error::connection_refused) return "refused";
  if (ec == net::error::broken_pipe) return "broken_pipe";
  if (ec == net::error::operation_aborted) return "aborted";
  if (ec == http::error::body_limit) return "body_limit";
  std::string text = ec.message();
  std::replace(text.begin(), text.end(), ' ', '_');
  return text;
}

net::awaitable<RequestResult> run_request(const RunnerContext& context, RequestPlan plan) {
  RequestResult result;
  result.kind = plan.kind;
  result.variant = plan.variant;
  result.in_burst = plan.in_burst;
  result.stream = plan.stream;
  const Clock::time_point start = Clock::now();
  result.start_s = std::chrono::duration<double>(start - context.run_start).count();
  Exchange x{context, plan, result, start, start + seconds(context.options->request_timeout_s)};
  for (int attempt = 0; attempt < 2; ++attempt) {
    const Clock::time_point connect_deadline =
        std::min(x.deadline, Clock::now() + seconds(context.options->connect_timeout_s));
    Acquired a = co_await context.pool->acquire(plan.fresh_connection || attempt > 0, connect_deadline,
                                                plan.slow ? 4096 : 0);
    if (!a.connection) {
      result.transport_error = "connect_" + describe_error(a.ec);
      break;
    }
    const bool answered = co_await exchange_on(x, *a.connection, a.reused);
    if (plan.fresh_connection) {
      a.connection->close();
    } else {
      context.pool->release(std::move(a.connection));
    }
    if (answered) break;
  }
  result.e2e_ms = ms_between(start, Clock::now());
  co_return result;
}

}  // namespace deltaserve::loadtest
