#include "loadtest/request_plan.h"

#include <algorithm>
#include <array>

namespace deltaserve::loadtest {
namespace {

constexpr std::array<const char*, kNumRequestKinds> kKindNames = {
    "chat_stream",   "completion_stream", "non_stream",     "slow_reader",   "cancel_before_token",
    "cancel_mid_stream", "cancel_at_step", "invalid_json",  "invalid_utf8",  "oversize_body",
    "absurd_params", "missing_params",    "over_context",   "bad_http",      "burst"};

std::string judge_complete(const RequestPlan& plan, const RequestResult& r, bool pressure) {
  if (r.status == 429) return pressure ? "" : "429 without a burst or a full queue";
  if (!r.transport_error.empty()) return "transport: " + r.transport_error;
  if (r.status != 200) return "status " + std::to_string(r.status) + " for a well-formed request";
  if (!r.error_type.empty()) return "error event in the stream: " + r.error_type;
  if (r.finish_reason.empty()) return "no finish_reason";
  if (r.num_finish_reasons > 1) return "more than one finish_reason";
  if (plan.stream && !r.done_marker) return "no [DONE]";
  if (!r.has_usage) return "no usage";
  return "";
}

std::string judge_cancel(const RequestResult& r) {
  if (r.cancelled) return "";  // closed on purpose: whatever arrived before is fine
  if (r.status == 429) return "";
  if (!r.transport_error.empty()) return "transport: " + r.transport_error;
  if (r.status != 200) return "status " + std::to_string(r.status);
  if (!r.error_type.empty()) return "error event in the stream: " + r.error_type;
  if (r.finish_reason.empty()) return "ended before the cancel without a finish_reason";
  return "";
}

std::string judge_status(const RequestPlan& plan, const RequestResult& r) {
  const bool listed = std::find(plan.expected_statuses.begin(), plan.expected_statuses.end(),
                                r.status) != plan.expected_statuses.end();
  if (r.status == 0) return "no response (" + r.transport_error + ")";
  if (!listed) {
    std::string want;
    for (unsigned s : plan.expected_statuses) want += (want.empty() ? "" : "/") + std::to_string(s);
    return "status " + std::to_string(r.status) + ", expected " + want;
  }
  if (r.status >= 400 && r.error_type.empty()) return "no OpenAI error body";
  return "";
}

}  // namespace

const char* request_kind_name(RequestKind kind) {
  return kKindNames[static_cast<size_t>(kind)];
}

bool parse_request_kind(const std::string& name, RequestKind& kind) {
  for (size_t i = 0; i < kKindNames.size(); ++i) {
    if (name == kKindNames[i]) {
      kind = static_cast<RequestKind>(i);
      return true;
    }
  }
  return false;
}

std::string RequestResult::error_key() const {
  if (!transport_error.empty() && !cancelled) {
    return "transport:" + transport_error.substr(0, transport_error.find(' '));
  }
  if (status != 0 && status != 200) {
    return "http_" + std::to_string(status) + ":" + (error_type.empty() ? "no_error_body" : error_type);
  }
  if (!error_type.empty()) return "stream_error:" + error_type;
  if (cancelled) return "";
  if (status == 200 && finish_reason.empty()) return "incomplete:no_finish_reason";
  if (status == 200 && !has_usage) return "incomplete:no_usage";
  if (status == 200 && stream && !done_marker) return "incomplete:no_done";
  return "";
}

void judge_result(const RequestPlan& plan, RequestResult& result, bool pressure) {
  if (result.status >= 500) {
    result.failure = "unearned " + std::to_string(result.status) + " (" + result.error_type + ")";
    return;
  }
  if (!result.error_type.empty() && result.status == 200) {
    result.failure = "error event in the stream: " + result.error_type;
    return;
  }
  switch (plan.expect) {
    case Expect::Complete: result.failure = judge_complete(plan, result, pressure); break;
    case Expect::ClientCancel: result.failure = judge_cancel(result); break;
    case Expect::Status: result.failure = judge_status(plan, result); break;
  }
}

}  // namespace deltaserve::loadtest
