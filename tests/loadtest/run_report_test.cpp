// Percentiles, the Prometheus text parser, outcome judging and error keys of deltaserve-load.
#include <gtest/gtest.h>

#include "loadtest/leak_checks.h"
#include "loadtest/request_plan.h"
#include "loadtest/run_report.h"
#include "loadtest/server_probe.h"

namespace deltaserve::loadtest {
namespace {

TEST(Distribution, InterpolatesPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Distribution d = distribution(v);
  EXPECT_EQ(d.count, 100);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.p50, 50.5);
  EXPECT_NEAR(d.p90, 90.1, 1e-9);
  EXPECT_NEAR(d.p99, 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(d.max, 100.0);
  EXPECT_EQ(distribution({}).count, 0);
  EXPECT_DOUBLE_EQ(distribution({7.0}).p99, 7.0);
}

TEST(PrometheusText, ReadsPlainAndLabelledSeries) {
  const MetricsSample m = parse_prometheus_text(
      "# HELP deltaserve_kv_blocks_used KV blocks.\n# TYPE deltaserve_kv_blocks_used gauge\n"
      "deltaserve_kv_blocks_used 3\n"
      "deltaserve_errors_total{type=\"server_error\"} 2\n"
      "deltaserve_errors_total{type=\"invalid_request_error\"} 5 1700000000\n"
      "deltaserve_errors_totalx 100\n"
      "odd{label=\"a } b\"} 1.5e3\n");
  ASSERT_TRUE(m.ok);
  EXPECT_EQ(m.get("deltaserve_kv_blocks_used").value_or(-1), 3);
  EXPECT_EQ(m.get("deltaserve_errors_total{type=\"server_error\"}").value_or(-1), 2);
  EXPECT_DOUBLE_EQ(m.sum("deltaserve_errors_total"), 7.0);  // not the ...x series
  EXPECT_EQ(m.get("odd{label=\"a } b\"}").value_or(-1), 1500);
  EXPECT_TRUE(m.has_prefix("deltaserve_kv"));
  EXPECT_FALSE(m.has_prefix("deltaserve_device_memory"));
}

RequestResult completed_stream() {
  RequestResult r;
  r.status = 200;
  r.stream = true;
  r.finish_reason = "length";
  r.num_finish_reasons = 1;
  r.done_marker = true;
  r.has_usage = true;
  return r;
}

TEST(JudgeResult, AWellFormedRequestMustFinish) {
  RequestPlan plan;
  plan.stream = true;
  RequestResult ok = completed_stream();
  judge_result(plan, ok, false);
  EXPECT_EQ(ok.failure, "");

  RequestResult no_done = completed_stream();
  no_done.done_marker = false;
  judge_result(plan, no_done, false);
  EXPECT_EQ(no_done.failure, "no [DONE]");

  RequestResult twice = completed_stream();
  twice.num_finish_reasons = 2;
  judge_result(plan, twice, false);
  EXPECT_EQ(twice.failure, "more than one finish_reason");

  RequestResult rejected;
  rejected.status = 429;
  rejected.error_type = "rate_limit_error";
  judge_result(plan, rejected, true);
  EXPECT_EQ(rejected.failure, "");  // earned under pressure
  judge_result(plan, rejected, false);
  EXPECT_NE(rejected.failure, "");
}

TEST(JudgeResult, NoFiveHundredIsEverEarned) {
  RequestPlan plan;
  plan.expect = Expect::Status;
  plan.expected_statuses = {400, 500};
  RequestResult r;
  r.status = 500;
  r.error_type = "server_error";
  judge_result(plan, r, true);
  EXPECT_NE(r.failure.find("unearned 500"), std::string::npos);
}

TEST(JudgeResult, ExpectedStatusesNeedAnErrorBody) {
  RequestPlan plan;
  plan.expect = Expect::Status;
  plan.expected_statuses = {400};
  RequestResult r;
  r.status = 400;
  judge_result(plan, r, false);
  EXPECT_EQ(r.failure, "no OpenAI error body");
  r.error_type = "invalid_request_error";
  judge_result(plan, r, false);
  EXPECT_EQ(r.failure, "");
  r.status = 200;
  r.error_type.clear();
  judge_result(plan, r, false);
  EXPECT_EQ(r.failure, "status 200, expected 400");
}

TEST(JudgeResult, ACancelledRequestMayEndAnyWayButBadly) {
  RequestPlan plan;
  plan.expect = Expect::ClientCancel;
  RequestResult cut;
  cut.status = 200;
  cut.cancelled = true;
  judge_result(plan, cut, false);
  EXPECT_EQ(cut.failure, "");
  RequestResult error_event = cut;
  error_event.error_type = "server_error";
  judge_result(plan, error_event, false);
  EXPECT_NE(error_event.failure, "");
}

TEST(ErrorKey, NamesTheCategory) {
  RequestResult r;
  r.transport_error = "timeout reading the header";
  EXPECT_EQ(r.error_key(), "transport:timeout");
  RequestResult s;
  s.status = 413;
  s.error_type = "invalid_request_error";
  EXPECT_EQ(s.error_key(), "http_413:invalid_request_error");
  EXPECT_EQ(completed_stream().error_key(), "");
}

TEST(LeakChecks, CompareBeforeAndAfter) {
  ServerSnapshot before, after;
  before.metrics = parse_prometheus_text("deltaserve_kv_blocks_used 0\ndeltaserve_state_slots_used 0\n"
                                         "deltaserve_requests_running 0\ndeltaserve_requests_waiting 0\n");
  after.metrics = parse_prometheus_text("deltaserve_kv_blocks_used 2\ndeltaserve_state_slots_used 0\n"
                                        "deltaserve_requests_running 0\ndeltaserve_requests_waiting 0\n");
  LoadOptions options;
  const auto checks = leak_checks(before, after, options);
  EXPECT_FALSE(all_pass(checks));
  bool saw_kv = false;
  for (const Check& c : checks) {
    if (c.name == "KV blocks used") {
      saw_kv = true;
      EXPECT_EQ(c.status, CheckStatus::Fail);
      EXPECT_EQ(c.after, 2);
    }
    if (c.name == "server resident memory (MiB)" || c.name == "device memory used") {
      EXPECT_EQ(c.status, CheckStatus::Skipped) << c.name;
    }
  }
  EXPECT_TRUE(saw_kv);
}

const Check& find_check(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& c : checks) {
    if (c.name == name) return c;
  }
  static const Check none;
  ADD_FAILURE() << "no check " << name;
  return none;
}

TEST(LeakChecks, DeviceMemoryMustComeBackExactly) {
  ServerSnapshot before, after;
  before.metrics = parse_prometheus_text("deltaserve_device_memory_used_bytes 1000\n");
  after.metrics = parse_prometheus_text("deltaserve_device_memory_used_bytes 1000\n");
  LoadOptions options;
  EXPECT_EQ(find_check(leak_checks(before, after, options), "device memory used").status, CheckStatus::Pass);
  after.metrics = parse_prometheus_text("deltaserve_device_memory_used_bytes 1024\n");
  EXPECT_EQ(find_check(leak_checks(before, after, options), "device memory used").status, CheckStatus::Fail);
  after.metrics = parse_prometheus_text("deltaserve_device_memory_used_bytes 512\n");
  EXPECT_EQ(find_check(leak_checks(before, after, options), "device memory used").status, CheckStatus::Fail);
}

TEST(LeakChecks, OpenConnectionsNetOfTheToolsOwn) {
  ServerSnapshot before, after;
  // Before: the scrape itself and 3 pooled connections of the tool; after: the scrape only.
  before.metrics = parse_prometheus_text("deltaserve_open_connections 4\n");
  before.client_open_connections = 3;
  after.metrics = parse_prometheus_text("deltaserve_open_connections 1\n");
  LoadOptions options;
  const Check pass = find_check(leak_checks(before, after, options), "server open connections");
  EXPECT_EQ(pass.status, CheckStatus::Pass);
  EXPECT_EQ(pass.before, 1);
  EXPECT_EQ(pass.after, 1);
  // A connection the tool closed is still counted by the server.
  after.metrics = parse_prometheus_text("deltaserve_open_connections 2\n");
  EXPECT_EQ(find_check(leak_checks(before, after, options), "server open connections").status,
            CheckStatus::Fail);
  // An older server without the gauge: not checked.
  after.metrics = parse_prometheus_text("deltaserve_requests_running 0\n");
  EXPECT_EQ(find_check(leak_checks(before, after, options), "server open connections").status,
            CheckStatus::Skipped);
}

TEST(ServerUrl, ParsesHostPortAndPrefix) {
  std::string error;
  const auto url = parse_server_url("http://127.0.0.1:8000/api/", error);
  ASSERT_TRUE(url);
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, "8000");
  EXPECT_EQ(url->base_path, "/api");
  EXPECT_FALSE(parse_server_url("https://x:1", error));
  EXPECT_FALSE(parse_server_url("http://x", error));
  EXPECT_FALSE(parse_server_url("http://x:8o", error));
}

}  // namespace
}  // namespace deltaserve::loadtest
