// Executes one RequestPlan against the server and records what happened: status, OpenAI
// error type, finish_reason, [DONE], usage, time to first token and per-token gaps, and
// whether the tool cut the connection on purpose. Never judges (judge_result does) and
// never throws: every failure ends up in the result.
//
// Token timing: with continuous usage (the default) every chunk carries the server's
// running completion_tokens, so a chunk's token count is the difference and each of its
// tokens gets gap / count as inter-token latency. Without it, the first and last chunks
// with text give the span, and ITL is span / (usage tokens - 1) for each token.
//
// Threading: the tool's one I/O thread.
#pragma once

#include <functional>

#include "loadtest/connection_pool.h"
#include "loadtest/load_options.h"
#include "loadtest/request_plan.h"

namespace deltaserve::loadtest {

struct RunnerContext {
  const LoadOptions* options = nullptr;
  ConnectionPool* pool = nullptr;
  Clock::time_point run_start;
  // Called for every chunk that carried tokens (time, number of tokens): the time series.
  std::function<void(Clock::time_point, int64_t)> on_tokens;
};

net::awaitable<RequestResult> run_request(const RunnerContext& context, RequestPlan plan);

// One word for an error code ("timeout", "eof", "reset", ...), for the error table.
std::string describe_error(const beast::error_code& ec);

}  // namespace deltaserve::loadtest
